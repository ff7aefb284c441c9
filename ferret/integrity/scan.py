"""Static integrity scan of a candidate's source: patterns from docs/cheats.md, found on the AST.

A candidate is one Python file defining `run(inputs, outputs, params, trace=None)`. Honest candidates
import math, torch and triton; they use torch only to allocate, view and cast tensors and to launch
their Triton kernels, and do their math inside `@triton.jit` functions. Everything else that reaches
for a library, the file system, the clock, other threads, the allocator, state kept across calls or the
judge's own files is reported as a `Finding` that names the cheat it enables.

    result = scan_file("candidate.py", shape_constants={16, 512, 7168})
    if not result.passed:
        for f in result.findings:
            print(f.line, f.cheat, f.message)

The scan parses and never imports or runs the candidate. It is one layer: what it cannot see (a launch
never taken at run time, floating-point compute reached by a path it does not know, impossible speed)
is for the runtime checks. Lines are 1-based, columns 1-based.

Each pattern is one rule (`ferret.integrity.rules`, listed in `ferret.integrity.registry.RULES`); a
preset (`ferret.integrity.presets`) names the rules a scan runs, `triton` by default.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

from ferret.integrity.context import ScanContext
from ferret.integrity.model import CHEATS, WORDS, Finding, ScanResult, finding
from ferret.integrity.presets import rules_for
from ferret.integrity.registry import Rule
from ferret.syntax import parse_module

__all__ = ["CHEATS", "Finding", "ScanResult", "scan_file", "scan_source"]

_WORDS = WORDS  # the prompts quote the cheats in words from here


def run_rules(ctx: ScanContext, rules: Iterable[Rule]) -> list[Finding]:
    """Every rule's hits as findings: one per cheat and spot (the hit the walk came to first; see
    `ferret.integrity.registry`), sorted by line, column and cheat."""
    hits = []
    after = len(ctx.nodes)  # whole-module rules report after every node's
    for r in rules:
        for seq, hit in enumerate(r.check(ctx)):
            walked = after if r.after_walk else ctx.order[id(hit.via if hit.via is not None else hit.node)]
            hits.append(((walked, hit.step, r.rank, seq), r.cheat, hit))
    hits.sort(key=lambda h: h[0])
    found: dict[tuple[str, int, int], Finding] = {}
    for _, cheat, hit in hits:
        line = getattr(hit.node, "lineno", 1) or 1
        col = (getattr(hit.node, "col_offset", 0) or 0) + 1
        if (cheat, line, col) not in found:
            found[(cheat, line, col)] = finding(ctx.lines, cheat, line, col, hit.detail)
    return sorted(found.values(), key=lambda f: (f.line, f.col, f.cheat))


def _unscannable(path: str, digest: str, source: str, line: int, col: int, why: str) -> ScanResult:
    f = finding(source.splitlines(), "syntax_error", line, col, f"{why}, so nothing in it can be judged")
    return ScanResult(path=path, sha256=digest, findings=[f])


def scan_source(
    source: str,
    path: str = "<candidate>",
    shape_constants: Iterable[int] = frozenset(),
    preset: str = "triton",
    storage_dtypes: Iterable[str] = (),
) -> ScanResult:
    """Scan a candidate's source with a preset's rules. Never raises on bad input: a file that does not
    parse (or nests too deeply to walk) yields one `syntax_error` finding. An unknown preset is a
    ValueError. `storage_dtypes`: the float8 dtypes the contract declares as storage, whose casts are allowed."""
    rules = rules_for(preset)
    digest = hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest()
    try:
        tree = parse_module(source, filename=path)
    except (SyntaxError, ValueError) as err:
        msg = getattr(err, "msg", None) or str(err)
        return _unscannable(
            path,
            digest,
            source,
            getattr(err, "lineno", None) or 1,
            getattr(err, "offset", None) or 1,
            f"the candidate does not parse ({msg})",
        )
    except (RecursionError, MemoryError):
        return _unscannable(path, digest, source, 1, 1, "the candidate nests too deeply to parse")
    constants = frozenset(int(c) for c in shape_constants)
    try:
        findings = run_rules(ScanContext(source, tree, constants, storage_dtypes), rules)
    except RecursionError:
        return _unscannable(path, digest, source, 1, 1, "the candidate nests too deeply to scan")
    return ScanResult(path=path, sha256=digest, findings=findings)


def scan_file(
    path: str | Path, shape_constants: Iterable[int] = frozenset(), preset: str = "triton", storage_dtypes: Iterable[str] = ()
) -> ScanResult:
    """Scan a candidate file; sha256 is of the file's bytes."""
    raw = Path(path).read_bytes()
    try:
        source = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        rules_for(preset)  # an unknown preset is an error whatever the file holds
        f = finding([], "syntax_error", 1, 1, f"the candidate is not UTF-8 text ({err.reason}), so nothing in it can be judged")
        return ScanResult(path=str(path), sha256=hashlib.sha256(raw).hexdigest(), findings=[f])
    result = scan_source(source, str(path), shape_constants, preset, storage_dtypes)
    return result.model_copy(update={"sha256": hashlib.sha256(raw).hexdigest()})
