"""Decoy kernels: code that is there to be read, not run.

A kernel under `if False:`, after a `return`, or never launched at all makes a candidate look like it
does the work while something else produces the answer.
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Iterable, Iterator

from ferret.integrity.astutil import UNKNOWN, const_value
from ferret.integrity.context import ScanContext
from ferret.integrity.registry import Hit, rule

_TERMINATORS = (ast.Return, ast.Raise, ast.Continue, ast.Break)


def _literal_tests(ctx: ScanContext) -> Iterator[tuple[ast.If | ast.While | ast.IfExp, str, object]]:
    """(node, keyword, value) for every if, while and conditional expression whose test is built only
    from literals (`False`, `not True`, `1 == 2`)."""
    for node in ctx.nodes_of(ast.If, ast.While, ast.IfExp):
        value = const_value(node.test)
        if value is not UNKNOWN:
            yield node, "while" if isinstance(node, ast.While) else "if", value


@rule("never_taken_branch", "decoy_kernel")
def never_taken_branch(ctx: ScanContext) -> Iterator[Hit]:
    """A branch under a test that is always false: if False: ..., while 0: ..."""
    for node, kind, value in _literal_tests(ctx):
        if not value:
            yield Hit(
                node, f"`{kind} {ast.unparse(node.test)}`: a branch that never runs; code there (a kernel, a launch) is a decoy"
            )


@rule("never_taken_else", "decoy_kernel")
def never_taken_else(ctx: ScanContext) -> Iterator[Hit]:
    """The else of `if True:` (a while's else runs when the loop ends, so it is not one)."""
    for node, kind, value in _literal_tests(ctx):
        if value and node.orelse and kind != "while":
            first = node.orelse[0] if isinstance(node.orelse, list) else node.orelse
            yield Hit(first, f"the else of `{kind} {ast.unparse(node.test)}` never runs; code there is a decoy", via=node)


@rule("unreachable_code", "decoy_kernel", after_walk=True)
def unreachable_code(ctx: ScanContext) -> Iterator[Hit]:
    """Statements after a return, raise, continue or break in the same block."""
    for node in ctx.everything:
        for field in ("body", "orelse", "finalbody"):
            block = getattr(node, field, None)
            if not isinstance(block, list):
                continue
            for stmt, nxt in itertools.pairwise(block):
                if isinstance(stmt, _TERMINATORS):
                    yield Hit(
                        nxt,
                        f"unreachable code after {type(stmt).__name__.lower()} (line {stmt.lineno}): code "
                        "that never runs is a decoy",
                    )
                    break


def _names_in(nodes: Iterable[ast.AST]) -> set[str]:
    return {n.id for root in nodes for n in ast.walk(root) if isinstance(n, ast.Name)}


def _reachable_functions(ctx: ScanContext) -> set[str]:
    """Module-level functions that code reachable from run or the module's top level refers to (a
    function's body counts once something reachable refers to the function)."""
    roots: list[ast.AST] = []
    for stmt in ctx.tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            roots += stmt.decorator_list + [stmt.args] + ([stmt.returns] if stmt.returns is not None else [])
        else:
            roots.append(stmt)
    funcs, seen = ctx.top_functions, set()
    todo = _names_in(roots) | ({"run"} if "run" in funcs else set())
    while todo:
        name = todo.pop()
        if name in seen or name not in funcs:
            continue
        seen.add(name)
        todo |= _names_in(funcs[name].body) - seen
    return seen


@rule("unlaunched_kernel", "decoy_kernel", after_walk=True)
def unlaunched_kernel(ctx: ScanContext) -> Iterator[Hit]:
    """A module-level @triton.jit function nothing reachable from run refers to."""
    reachable = _reachable_functions(ctx)
    for name, node in ctx.top_functions.items():
        if id(node) in ctx.jit_defs and name not in reachable:
            yield Hit(node, f"@triton.jit kernel {name} is defined but never launched: nothing reachable from run refers to it")
