"""Names, attributes and strings that are banned wherever they appear.

Some references need no call to be a cheat: reaching `sys.modules`, `x.data_ptr`, `__file__` or
`torch.cuda.Stream` at all, or spelling a path into the gates in a string. The tables in
`ferret.integrity.tables` list them; one rule per cheat reads each table.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from ferret.integrity.astutil import str_value
from ferret.integrity.context import ScanContext, shared
from ferret.integrity.facts import builtin_calls, shown_path, string_of
from ferret.integrity.registry import Hit, register, rule
from ferret.integrity.tables import (
    ATTR_RULES,
    MENTION_RULES,
    MODULE_FILE,
    NAME_RULES,
    PERSISTING_MARKERS,
    STRING_RULES,
    examples,
    lookup,
    slugs_of,
)


def _names(slug: str):
    """The rule for one cheat of NAME_RULES: a bare name banned wherever it is used."""

    def check(ctx: ScanContext) -> Iterator[Hit]:
        for node in ctx.nodes_of(ast.Name):
            if NAME_RULES.get(node.id, ("",))[0] == slug:
                yield Hit(node, f"uses {node.id}: {NAME_RULES[node.id][1]}")

    return check


def _attributes(slug: str):
    """The rule for one cheat of ATTR_RULES: an attribute banned on any object."""

    def check(ctx: ScanContext) -> Iterator[Hit]:
        for node in ctx.nodes_of(ast.Attribute):
            if ATTR_RULES.get(node.attr, ("",))[0] == slug:
                yield Hit(node, f"uses .{node.attr}: {ATTR_RULES[node.attr][1]}")

    return check


for _slug in slugs_of(NAME_RULES):
    register(f"name.{_slug}", _slug, _names(_slug), doc=f"A bare name banned for {_slug}: {examples(NAME_RULES, _slug)}.")
for _slug in slugs_of(ATTR_RULES):
    register(
        f"attribute.{_slug}",
        _slug,
        _attributes(_slug),
        doc=f"An attribute banned on any object for {_slug}: {examples({f'.{k}': v for k, v in ATTR_RULES.items()}, _slug)}.",
    )


@rule("nan_to_num", "nan_wildcard")
def nan_to_num(ctx: ScanContext) -> Iterator[Hit]:
    """.nan_to_num in the launcher hides NaN from the comparison."""
    for node in ctx.nodes_of(ast.Attribute):
        if node.attr == "nan_to_num" and not ctx.scope(node).in_jit:
            yield Hit(node, "nan_to_num hides NaN in the output (the gate owns the NaN/Inf policy)")


@rule("float_nan", "nan_wildcard")
def float_nan(ctx: ScanContext) -> Iterator[Hit]:
    """float("nan") in the launcher."""
    for node, _ in builtin_calls(ctx, "float"):
        text = str_value(node.args[0]) if node.args else None
        if text is not None and not ctx.scope(node).in_jit and text.strip().lower().lstrip("+-") == "nan":
            yield Hit(
                node, "float('nan') in the launcher: a NaN made outside the kernel can serve as a wildcard in the comparison"
            )


def _identifiers(ctx: ScanContext) -> Iterator[tuple[ast.AST, str, str]]:
    """(node, text, what) for every identifier the candidate defines or uses, and every string literal."""
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Constant, ast.Name, ast.Attribute)
    for node in ctx.nodes_of(*kinds):
        if isinstance(node, ast.Constant):
            text = string_of(ctx, node)
            if text is not None:
                yield node, text, "string"
        else:
            yield (
                node,
                node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else node.name,
                "name",
            )


@rule("persisting_identifier", "persisting_l2")
def persisting_identifier(ctx: ScanContext) -> Iterator[Hit]:
    """An identifier or string that spells CUDA's persisting-L2 controls (access-policy windows, cudart). CUDA C++
    source is read by `cuda_persisting_l2` instead, where `cudart` is also the prefix of CUDA's math constants."""
    for node, text, what in _identifiers(ctx):
        if what == "string" and "__global__" in text:
            continue
        if any(marker in text.lower() for marker in PERSISTING_MARKERS):
            yield Hit(
                node,
                f"the {what} {text[:60]!r} points at CUDA's persisting-L2 controls (access-policy "
                "windows, cudaLimitPersistingL2CacheSize), which keep data in L2 past the judge's flush",
            )


@shared
def _mentioned(ctx: ScanContext) -> list[tuple[ast.AST, str, tuple[str, str, str]]]:
    """(node, path, MENTION_RULES entry) for every name read and attribute that resolves to a banned path."""
    found = []
    for node in ctx.nodes_of(ast.Name, ast.Attribute):
        if isinstance(node, ast.Name):
            path = ctx.aliases.get(node.id) if isinstance(node.ctx, ast.Load) else None
        else:
            path = ctx.resolve(node)
        hit = lookup(MENTION_RULES, path) if path is not None else None
        if hit is not None:
            found.append((node, path, hit))
    return found


def _mentions(slug: str):
    """The rule for one cheat of MENTION_RULES: a name or attribute chain that resolves to a banned path."""

    def check(ctx: ScanContext) -> Iterator[Hit]:
        for node, path, (_, hit_slug, why) in _mentioned(ctx):
            if hit_slug == slug and not (slug == "nan_wildcard" and ctx.scope(node).in_jit):
                yield Hit(node, f"{shown_path(node, path)}: {why}")  # a NaN inside a kernel is the kernel's business

    return check


for _slug in slugs_of(MENTION_RULES):
    register(
        f"mention.{_slug}",
        _slug,
        _mentions(_slug),
        doc=f"A reference through the imports to a path banned wherever it appears, for {_slug}: "
        f"{examples(MENTION_RULES, _slug)}.",
    )


@shared
def _strings_of(ctx: ScanContext) -> list[tuple[ast.Constant, str]]:
    """(node, text) for every string or bytes literal that is not a docstring."""
    texts = [(node, string_of(ctx, node)) for node in ctx.nodes_of(ast.Constant)]
    return [(node, text) for node, text in texts if text is not None]


# In CUDA C++ source, the judge's own headers (`ferret.backends.cuda` puts them on the compiler's path).
_JUDGE_INCLUDE = re.compile(r"#[ \t]*include[ \t]*<ferret/[\w./]+>")


def _strings(slug: str):
    """The rule for one cheat of STRING_RULES: a string literal that contains a banned marker (in CUDA source, an
    `#include <ferret/...>` of the judge's headers aside)."""
    markers = [(marker, why) for marker, s, why in STRING_RULES if s == slug]

    def check(ctx: ScanContext) -> Iterator[Hit]:
        for node, text in _strings_of(ctx):
            if "__global__" in text:
                text = _JUDGE_INCLUDE.sub("", text)
            for marker, why in markers:
                if marker in text:
                    yield Hit(node, f"the string {text[:60]!r} names {marker!r}: {why}")

    return check


for _slug in dict.fromkeys(s for _, s, _ in STRING_RULES):
    register(
        f"string.{_slug}",
        _slug,
        _strings(_slug),
        doc=f"A string literal (not a docstring) naming a file, "
        f"path or hook banned for {_slug}: {', '.join(repr(m) for m, s, _ in STRING_RULES if s == _slug)}.",
    )


@rule("module_file_string", "shadowing")
def module_file_string(ctx: ScanContext) -> Iterator[Hit]:
    """A string naming a Python module file (torch.py, sitecustomize.py, a .pth)."""
    for node, text in _strings_of(ctx):
        if MODULE_FILE.search(text):
            yield Hit(
                node,
                f"the string {text[:60]!r} names a Python module file: a file named like a module "
                "(torch.py, sitecustomize.py, a .pth) shadows what the judge imports",
            )
