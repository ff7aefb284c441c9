"""Shape expressions: integers or arithmetic over a case's named dims (`B`, `H * 256`, `L - 1`).

Evaluated with a tiny AST walker instead of eval(): contracts are data, never code.
"""

from __future__ import annotations

import ast
import operator

from ferret.syntax import parse_expression

ShapeExpr = int | str

_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}


def _walk(node: ast.AST, dims: dict[str, int] | None, names: set[str] | None) -> int:
    if isinstance(node, ast.Expression):
        return _walk(node.body, dims, names)
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.Name):
        if dims is not None:
            if node.id not in dims:
                raise ValueError(f"unknown dim {node.id!r} (the case defines {sorted(dims)})")
            return dims[node.id]
        if names is not None and node.id not in names:
            raise ValueError(f"unknown dim {node.id!r} (cases define {sorted(names)})")
        return 1
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _walk(node.left, dims, names), _walk(node.right, dims, names)
        if isinstance(node.op, (ast.FloorDiv, ast.Mod)) and right == 0 and dims is not None:
            raise ValueError("division by zero")
        if isinstance(node.op, (ast.FloorDiv, ast.Mod)) and right == 0:
            return 0
        return _BINARY[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_walk(node.operand, dims, names)
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("min", "max")
        and node.args
        and not node.keywords
    ):
        values = [_walk(a, dims, names) for a in node.args]
        return (min if node.func.id == "min" else max)(values)
    raise ValueError(f"unsupported syntax {ast.dump(node)[:60]!r}: use integers, dim names, + - * // % ** min max")


def _parse(expr: ShapeExpr) -> ast.AST:
    if isinstance(expr, bool):
        raise ValueError(f"expected an integer or an expression, got {expr!r}")
    if isinstance(expr, int):
        return ast.Expression(ast.Constant(expr))
    try:
        return parse_expression(str(expr))
    except SyntaxError as err:
        raise ValueError(f"cannot parse shape expression {expr!r}: {err.msg}") from None


def evaluate(expr: ShapeExpr, dims: dict[str, int]) -> int:
    """The integer value of `expr` for the given dims."""
    try:
        return _walk(_parse(expr), dims, None)
    except ValueError as err:
        raise ValueError(f"{expr!r}: {err}") from None


def evaluate_shape(shape: list[ShapeExpr], dims: dict[str, int]) -> tuple[int, ...]:
    return tuple(evaluate(e, dims) for e in shape)


def check_expression(expr: ShapeExpr, known_dims: set[str]) -> None:
    """Raise ValueError when `expr` does not parse or names a dim no case defines."""
    try:
        _walk(_parse(expr), None, known_dims)
    except ValueError as err:
        raise ValueError(f"{expr!r}: {err}") from None
