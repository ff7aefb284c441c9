"""The lock: a gate's hash is the sha256 of its manifest, and the manifest holds the sha256 of every
file in the gate and of the judge's own source. Verification recomputes all of it."""

from __future__ import annotations

import ast
import hashlib
import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import ferret
from ferret.errors import GateTampered
from ferret.gate.trust import is_trusted, trust_dir

REPORT_FILE = "report.json"
MANIFEST_FILE = "manifest.json"
# Files the judge writes beside the locked ones; everything else in a gate folder must be in the manifest.
UNLOCKED_FILES = frozenset({REPORT_FILE, REPORT_FILE + ".lock", REPORT_FILE + ".tmp"})
# The judge's own source: editing any of it changes what a verdict means, so it counts as tampering. What
# it is comes from the code, not from a list kept by hand: every ferret module that these entry points
# import, directly or not (at module level or inside a function), and the packages holding them.
JUDGE_ENTRY_POINTS = ("ferret.gate.judge", "ferret.gate.build", "ferret.sandbox.runner", "ferret.bench.process")


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def sha256_files(root: Path, names: list[str]) -> dict[str, str]:
    """sha256 of each file `root / name`, several at once (hashlib lets go of the GIL over large buffers: a
    GPU gate's golden stages are gigabytes)."""
    if len(names) < 2:
        return {name: sha256_file(root / name) for name in names}
    with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1, len(names))) as pool:
        return dict(zip(names, pool.map(lambda name: sha256_file(root / name), names), strict=True))


def judge_source_hashes() -> dict[str, str]:
    root = Path(ferret.__file__).resolve().parent
    return {f"ferret/{path.relative_to(root).as_posix()}": sha256_file(path) for path in judge_source_files(root)}


def judge_source_files(root: Path) -> list[Path]:
    """The files of every ferret module the judge's entry points import, found by reading their imports
    (ast): nothing is imported or run to find them."""
    seen: set[str] = set()
    todo = list(JUDGE_ENTRY_POINTS)
    while todo:
        module = todo.pop()
        path = _module_file(root, module)
        if module in seen or path is None:
            continue
        seen.add(module)
        todo += _ferret_imports(path, module)
        todo += [".".join(module.split(".")[:i]) for i in range(1, module.count(".") + 1)]  # its packages
    return sorted({p for m in seen if (p := _module_file(root, m)) is not None})


def _module_file(root: Path, module: str) -> Path | None:
    if module != "ferret" and not module.startswith("ferret."):
        return None
    parts = module.split(".")[1:]
    if not parts:
        return root / "__init__.py"
    relative = Path(*parts)
    for candidate in (root / relative.with_suffix(".py"), root / relative / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


# What each source imports, by (module, file, sha256 of its bytes): a file is parsed again only when its
# content changed, so a process that verifies a gate before every candidate parses the judge's source once.
_IMPORTS: dict[tuple[str, str, str], tuple[str, ...]] = {}


def _ferret_imports(path: Path, module: str) -> list[str]:
    """The ferret modules `path` imports: `import ferret.x`, `from ferret.x import y` (y itself when it is a
    module), and relative imports."""
    source = path.read_bytes()
    key = (module, str(path), hashlib.sha256(source).hexdigest())
    if key not in _IMPORTS:
        _IMPORTS[key] = tuple(_parse_imports(source, path, module))
    return list(_IMPORTS[key])


def _parse_imports(source: bytes, path: Path, module: str) -> list[str]:
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            found += [base] + [f"{base}.{alias.name}" for alias in node.names]
    return [name for name in found if name == "ferret" or name.startswith("ferret.")]


def canonical_json(data: object) -> bytes:
    return (json.dumps(data, sort_keys=True, indent=1, allow_nan=False) + "\n").encode()


def gate_hash(manifest_bytes: bytes) -> str:
    return hashlib.sha256(manifest_bytes).hexdigest()


def locked_files(gate_dir: Path) -> list[str]:
    return sorted(
        p.relative_to(gate_dir).as_posix()
        for p in gate_dir.rglob("*")
        if p.is_file() and p.relative_to(gate_dir).as_posix() not in UNLOCKED_FILES | {MANIFEST_FILE}
    )


def verify_gate(gate_dir: str | Path, expected_hash: str | None = None, require_trusted: bool = False) -> dict:
    """Return the manifest of an intact gate; raise GateTampered naming each changed, missing or added file.

    With `require_trusted`, the gate's hash must also be one the test-writer recorded (ferret.gate.trust):
    a gate forged whole is self-consistent, but its hash was never recorded."""
    gate_dir = Path(gate_dir)
    manifest_path = gate_dir / MANIFEST_FILE
    if not manifest_path.is_file():
        raise GateTampered(gate_dir, [f"{MANIFEST_FILE}: missing"])
    manifest_bytes = manifest_path.read_bytes()
    digest = gate_hash(manifest_bytes)
    problems: list[str] = []
    expected = expected_hash or gate_dir.name
    if digest != expected:
        problems.append(f"{MANIFEST_FILE}: sha256 {digest[:16]}… does not match the gate's hash {expected[:16]}…")
    try:
        manifest = json.loads(manifest_bytes)
        files: dict[str, str] = manifest["files"]
    except (ValueError, KeyError, TypeError):
        raise GateTampered(gate_dir, problems + [f"{MANIFEST_FILE}: unreadable"]) from None
    present = set(locked_files(gate_dir))
    hashed = sha256_files(gate_dir, sorted(present & set(files)))
    for name, want in sorted(files.items()):
        if name not in present:
            problems.append(f"{name}: missing")
        elif hashed[name] != want:
            problems.append(f"{name}: changed (sha256 differs from the lock)")
    for name in sorted(present - set(files)):
        problems.append(f"{name}: added after the gate was locked")
    current_judge = judge_source_hashes()
    for name, want in sorted(manifest.get("judge_sources", {}).items()):
        have = current_judge.get(name)
        if have is None:
            problems.append(f"judge source {name}: missing")
        elif have != want:
            problems.append(f"judge source {name}: changed since the gate was built")
    for name in sorted(set(current_judge) - set(manifest.get("judge_sources", {}))):
        problems.append(f"judge source {name}: added since the gate was built")
    if require_trusted and not problems:
        if not is_trusted(digest):
            problems.append(
                f"gate hash {digest[:16]}… was not recorded by the test-writer in {trust_dir()} (built elsewhere, or forged "
                "whole); rebuild it with `ferret gate build`"
            )
    if problems:
        raise GateTampered(gate_dir, problems)
    return manifest
