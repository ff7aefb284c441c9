"""Imports: a Triton candidate needs math, torch and triton (and a few harmless standard modules).

A module outside that list is a library the candidate would call instead of writing the kernel; some
modules and names are banned for more than that (the reference and the judge, the file system and the
interpreter's frames, threads, clocks, caches, raw CUDA bindings); see `ferret.integrity.tables`.
Each import statement is examined path by path: the module, then each name imported from it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ferret.integrity.context import ScanContext
from ferret.integrity.facts import Imported, imported
from ferret.integrity.registry import Hit, register, rule
from ferret.integrity.tables import (
    ALLOWED_TABLE,
    IMPORT_RULES,
    LIB,
    MENTION_RULES,
    examples,
    lookup,
    slugs_of,
)


@rule("relative_import", "reference_import")
def relative_import(ctx: ScanContext) -> Iterator[Hit]:
    """from . import x: a candidate is one file; the package around it holds the reference or the judge."""
    for node in ctx.nodes_of(ast.ImportFrom):
        if node.level:
            yield Hit(
                node,
                f"relative import ({'.' * node.level}{node.module or ''}): a candidate is one "
                "self-contained file; a relative import reaches the package around it, where the reference "
                "or the judge lives",
            )


def _banned_module(item: Imported) -> tuple[str, str, str] | None:
    """The IMPORT_RULES entry a path falls under, unless a longer allowed prefix lets it through; for a
    name imported from a module, only an entry below a module that is itself not banned (the module's
    own entry is reported for the module)."""
    hit = lookup(IMPORT_RULES, item.path)
    if hit is None:
        return None
    if item.from_module is not None:
        return hit if hit[0] != item.from_module and not lookup(IMPORT_RULES, item.from_module) else None
    allowed = lookup(ALLOWED_TABLE, item.path)
    return hit if not allowed or len(hit[0]) >= len(allowed[0]) else None


def _mentions(slug: str):
    """The rule for one cheat of MENTION_RULES, at imports: importing a path banned wherever it appears."""

    def check(ctx: ScanContext) -> Iterator[Hit]:
        for item in imported(ctx):
            hit = lookup(MENTION_RULES, item.path)
            if hit is not None and hit[1] == slug:
                yield Hit(item.node, f"imports {item.path}: {hit[2]}", step=item.step)

    return check


def _bans(slug: str):
    """The rule for one cheat of IMPORT_RULES: importing a banned module (or a name below one)."""

    def check(ctx: ScanContext) -> Iterator[Hit]:
        for item in imported(ctx):
            hit = _banned_module(item)
            if hit is not None and hit[1] == slug:
                yield Hit(item.node, f"imports {item.path}: {hit[2]}", step=item.step)

    return check


# A path that names something banned wherever it appears (threading, torch.cuda.Stream, sys.modules ...).
for _slug in slugs_of(MENTION_RULES):
    register(
        f"import_mention.{_slug}",
        _slug,
        _mentions(_slug),
        doc=f"An import of a path banned wherever it appears, for {_slug}: {examples(MENTION_RULES, _slug)}.",
    )
# A module banned as an import (or a name below one: `from torch import nn`).
for _slug in slugs_of(IMPORT_RULES):
    register(
        f"import.{_slug}", _slug, _bans(_slug), doc=f"An import of a module banned for {_slug}: {examples(IMPORT_RULES, _slug)}."
    )


@rule("unlisted_import", LIB)
def unlisted_import(ctx: ScanContext) -> Iterator[Hit]:
    """A module neither allowed nor banned for a reason of its own (numpy, scipy, cupy's kin ...)."""
    for item in imported(ctx):
        if (
            item.from_module is None
            and not lookup(ALLOWED_TABLE, item.path)
            and lookup(MENTION_RULES, item.path) is None
            and _banned_module(item) is None
        ):
            yield Hit(
                item.node,
                f"imports {item.path}, a module outside what a Triton candidate needs (math, torch, "
                "triton): the candidate must write the kernel, not call a library",
                step=item.step,
            )


@rule("star_import", LIB)
def star_import(ctx: ScanContext) -> Iterator[Hit]:
    """from torch import *: every torch function becomes a bare name the scan cannot tell apart."""
    for node in ctx.nodes_of(ast.ImportFrom):
        module = node.module or ""
        if not node.level and any(a.name == "*" for a in node.names) and module.split(".")[0] in ("torch", "numpy"):
            yield Hit(
                node,
                f"from {module} import *: every PyTorch function becomes a bare name the scan cannot "
                "tell from the candidate's own",
            )
