"""Hard-coded test cases: branching on, or tabulating by, the dims of the contract's cases.

The judge passes the contract's case dims (above 2) as shape constants; a launcher that compares a
shape against one of them, keys a table by one or matches one has a path for a known case. Ordering
comparisons (`n <= 4096`, block sizing) and rank checks (`x.dim() == 3`) are not case checks, and
nothing inside a @triton.jit function counts.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ferret.integrity.astutil import is_rank_query
from ferret.integrity.context import ScanContext
from ferret.integrity.facts import int_literals
from ferret.integrity.registry import Hit, rule

_EQUALITY = (ast.Eq, ast.NotEq, ast.In, ast.NotIn, ast.Is, ast.IsNot)


def _case_dims(ctx: ScanContext, node: ast.AST, expr: ast.AST) -> Iterator[tuple[ast.AST, int]]:
    """Literals in `expr` that are case dims, where `node` is in the launcher."""
    if ctx.shape_constants and not ctx.scope(node).in_jit:
        yield from ((lit, value) for lit, value in int_literals(ctx, expr) if value in ctx.shape_constants)


@rule("case_dim_compared", "hardcoded_cases")
def case_dim_compared(ctx: ScanContext) -> Iterator[Hit]:
    """A comparison with a case dim: x.shape[1] == 7168, n in (4096, 7168), n != HIDDEN."""
    for node in ctx.nodes_of(ast.Compare):
        operands = [node.left, *node.comparators]
        if not any(isinstance(op, _EQUALITY) for op in node.ops) or any(is_rank_query(o) for o in operands):
            continue
        for operand in operands:
            for lit, value in _case_dims(ctx, node, operand):
                yield Hit(
                    lit,
                    f"compares against {value}, a dimension of the contract's test cases: a branch for a "
                    "known case (fresh shapes are drawn at check time)",
                    via=node,
                )


@rule("case_dim_keyed", "hardcoded_cases")
def case_dim_keyed(ctx: ScanContext) -> Iterator[Hit]:
    """A dict keyed by case dims, {7168: ..., 4096: ...}: a table of answers by case."""
    for node in ctx.nodes_of(ast.Dict):
        for key in node.keys:
            for lit, value in _case_dims(ctx, node, key) if key is not None else ():
                yield Hit(
                    lit,
                    f"a table keyed by {value}, a dimension of the contract's test cases: an answer for a known case",
                    via=node,
                )


@rule("case_dim_matched", "hardcoded_cases")
def case_dim_matched(ctx: ScanContext) -> Iterator[Hit]:
    """A match on a case dim: match n: case 7168: ..."""
    for node in ctx.nodes_of(ast.MatchValue):
        for lit, value in _case_dims(ctx, node, node.value):
            yield Hit(lit, f"matches {value}, a dimension of the contract's test cases", via=node)
