"""Small questions about AST nodes that need no facts about the module around them."""

from __future__ import annotations

import ast
import operator

from ferret.integrity.tables import LOW_DTYPE_NAMES, LOW_DTYPE_PREFIXES


def is_low_dtype_name(name: str) -> bool:
    """A dtype name below float32 (float16, bfloat16, the fp8 and fp4 families)."""
    return name in LOW_DTYPE_NAMES or name.startswith(LOW_DTYPE_PREFIXES)


def str_value(expr: ast.AST | None) -> str | None:
    """The value of a string literal, else None."""
    return expr.value if isinstance(expr, ast.Constant) and isinstance(expr.value, str) else None


def root_name(expr: ast.AST) -> str | None:
    """The name an expression hangs off: `x` for x.a[0].view(...).b; None for calls of plain functions."""
    while True:
        if isinstance(expr, (ast.Attribute, ast.Subscript, ast.Starred)):
            expr = expr.value
        elif isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute):
            expr = expr.func.value
        else:
            break
    return expr.id if isinstance(expr, ast.Name) else None


def peel(expr: ast.AST) -> list[ast.AST]:
    """Elements of tuple/list/set displays and dict values, recursively; the expression itself otherwise."""
    if isinstance(expr, (ast.Tuple, ast.List, ast.Set)):
        return [e for elt in expr.elts for e in peel(elt)]
    if isinstance(expr, ast.Dict):
        return [e for v in expr.values for e in peel(v)]
    return [expr]


def names_in(target: ast.AST) -> list[str]:
    """Names a binding target binds (not the base of `a[i] = ...` or `a.b = ...`)."""
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [n for elt in target.elts for n in names_in(elt)]
    if isinstance(target, ast.Starred):
        return names_in(target.value)
    return []


_CMP_OPS = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Is: operator.is_,
    ast.IsNot: operator.is_not,
}
UNKNOWN = object()


def const_value(expr: ast.AST):
    """The value of a test built only from literals (`False`, `0`, `not True`, `1 == 2`), else UNKNOWN."""
    if isinstance(expr, ast.Constant):
        return expr.value
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.Not):
        v = const_value(expr.operand)
        return UNKNOWN if v is UNKNOWN else (not v)
    if isinstance(expr, ast.BoolOp):
        values = [const_value(v) for v in expr.values]
        if any(v is UNKNOWN for v in values):
            return UNKNOWN
        return all(values) if isinstance(expr.op, ast.And) else any(values)
    if isinstance(expr, ast.Compare) and len(expr.ops) == 1 and type(expr.ops[0]) in _CMP_OPS:
        left, right = const_value(expr.left), const_value(expr.comparators[0])
        if left is UNKNOWN or right is UNKNOWN:
            return UNKNOWN
        try:
            return _CMP_OPS[type(expr.ops[0])](left, right)
        except TypeError:
            return UNKNOWN
    return UNKNOWN


def is_rank_query(expr: ast.AST) -> bool:
    """x.dim(), x.ndim, x.ndimension(), len(x.shape), len(x.size()): ranks, not case dims."""
    if isinstance(expr, ast.Attribute) and expr.attr == "ndim":
        return True
    if isinstance(expr, ast.Call):
        if isinstance(expr.func, ast.Attribute) and expr.func.attr in ("dim", "ndimension"):
            return True
        if isinstance(expr.func, ast.Name) and expr.func.id == "len" and expr.args:
            arg = expr.args[0]
            if isinstance(arg, ast.Attribute) and arg.attr == "shape":
                return True
            if isinstance(arg, ast.Call) and isinstance(arg.func, ast.Attribute) and arg.func.attr == "size":
                return True
    return False
