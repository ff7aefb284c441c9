"""Roofline expressions: the bytes no correct kernel can avoid moving and the flops it must do on one case.

A contract declares both (`roofline.bytes`, `roofline.flops`) as expressions over the case's dims, its own
numeric top-level params and its inputs' values. They are evaluated by an AST walker, never eval():
contracts are data, never code.

The language:
- numbers (integers and decimals), + - * / // ** and parentheses, unary minus;
- names: a dim of the case (B, H, L...), a numeric top-level param, or an input (a tensor of the case's
  values, for elementwise arithmetic and reductions: `sum(cache_lens + 1)`);
- functions: sum(t) (a tensor's sum), min(...) and max(...) (of one tensor: its smallest or largest entry;
  of several values: the smallest or largest, elementwise where tensors are among them), numel(name) and
  nbytes(name) (the element count and the size in bytes of an input or output of the case, from the
  contract's shapes, `$dtype` being the case's dtype variant).
The value must be a finite number >= 0; it is rounded down to an integer (a floor stays a floor).

Integer and boolean inputs are read as int64, floating-point ones as float64. torch is imported only
when an expression is evaluated.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol, TypeAlias

from ferret.errors import ContractError
from ferret.syntax import parse_expression

if TYPE_CHECKING:
    import torch
    from typing_extensions import TypeIs

Number: TypeAlias = int | float
FIELDS = ("bytes", "flops")
FUNCTIONS = ("sum", "min", "max", "numel", "nbytes")
ELEMENT_BYTES = {
    "float64": 8,
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "int64": 8,
    "int32": 4,
    "int16": 2,
    "int8": 1,
    "bool": 1,
}
FLOAT_DTYPES = ("float64", "float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2")
# `2 ** 64` is the largest power an expression may take: anything bigger is a typo, and far bigger never ends.
MAX_EXPONENT = 64

_BINARY: dict[type, Callable] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Pow: operator.pow,
}


@dataclass(frozen=True)
class TensorSpec:
    """An input or output of one case: its shape and dtype resolved, and its role."""

    shape: tuple[int, ...]
    dtype: str
    role: Literal["in", "inout", "out"]

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * ELEMENT_BYTES[self.dtype]


@dataclass(frozen=True)
class RooflineCount:
    """The least work of one case: `bytes` moved and `flops` done, from the contract's roofline or the generic rule."""

    bytes: int
    flops: int
    source: Literal["contract", "generic"]
    explanation: str


@dataclass(frozen=True)
class Names:
    """The names an expression may use (for the check at load time, before any case is at hand)."""

    dims: frozenset[str]
    params: frozenset[str]
    inputs: frozenset[str]
    tensors: frozenset[str]  # inputs and outputs: what numel() and nbytes() take


@dataclass(frozen=True)
class Scope:
    """What the names of an expression mean on one case."""

    dims: Mapping[str, int]
    params: Mapping[str, Number]
    tensors: Mapping[str, TensorSpec]
    values: Mapping[str, torch.Tensor | Filled]

    def names(self) -> Names:
        inputs = frozenset(n for n, spec in self.tensors.items() if spec.role != "out")
        return Names(frozenset(self.dims), frozenset(self.params), inputs, frozenset(self.tensors))


class Declaration(Protocol):
    @property
    def bytes(self) -> str: ...
    @property
    def flops(self) -> str: ...


class Subject(Protocol):
    """What count_roofline reads of a contract (ferret.contract.model.Contract is one)."""

    @property
    def op(self) -> str: ...
    @property
    def roofline(self) -> Declaration | None: ...
    def tensor_specs(self, dims: Mapping[str, int], dtype: str) -> dict[str, TensorSpec]: ...
    def numeric_params(self) -> dict[str, Number]: ...


# --- the static check ------------------------------------------------------------------------------


def parse(expr: str) -> ast.Expression:
    """The syntax tree of `expr`; ValueError when it does not parse. Line breaks count as spaces."""
    if not isinstance(expr, str) or not expr.strip():
        raise ValueError(f"expected an expression, got {expr!r}")
    if "#" in expr:
        raise ValueError("'#' inside an expression: put comments in YAML, above the field")
    try:
        return parse_expression(" ".join(expr.split()))
    except SyntaxError as err:
        raise ValueError(f"cannot parse {' '.join(expr.split())!r}: {err.msg}") from None


def _unknown_name(name: str, names: Names) -> str:
    def listed(group: frozenset[str]) -> str:
        return ", ".join(sorted(group)) or "none"

    return (
        f"unknown name {name!r}: not a dim ({listed(names.dims)}), a numeric param ({listed(names.params)}) "
        f"or an input ({listed(names.inputs)})"
    )


def _check_call(node: ast.Call, names: Names) -> None:
    if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
        called = node.func.id if isinstance(node.func, ast.Name) else ast.unparse(node.func)
        raise ValueError(f"unknown function {called!r} (there are {', '.join(FUNCTIONS)})")
    fn = node.func.id
    if node.keywords:
        raise ValueError(f"{fn}() takes no keyword arguments")
    if fn in ("numel", "nbytes"):
        if len(node.args) != 1 or not isinstance(node.args[0], ast.Name):
            raise ValueError(f"{fn}() takes the name of one input or output, as in {fn}(x)")
        if node.args[0].id not in names.tensors:
            raise ValueError(f"{fn}(): no input or output named {node.args[0].id!r} ({', '.join(sorted(names.tensors))})")
        return
    if fn == "sum" and len(node.args) != 1:
        raise ValueError("sum() takes one value")
    if not node.args:
        raise ValueError(f"{fn}() needs at least one value")
    for arg in node.args:
        _check(arg, names)


def _check(node: ast.AST, names: Names) -> None:
    if isinstance(node, ast.Expression):
        return _check(node.body, names)
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return None
    if isinstance(node, ast.Name):
        if node.id not in names.dims | names.params | names.inputs:
            raise ValueError(_unknown_name(node.id, names))
        return None
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        _check(node.left, names)
        return _check(node.right, names)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        return _check(node.operand, names)
    if isinstance(node, ast.Call):
        return _check_call(node, names)
    raise ValueError(f"unsupported syntax {ast.unparse(node)!r}: use numbers, names, + - * / // ** and {', '.join(FUNCTIONS)}")


def check_expression(expr: str, names: Names) -> None:
    """Raise ValueError when `expr` does not parse or uses a name or function it may not."""
    _check(parse(expr), names)


# --- evaluation ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Filled:
    """A tensor of `shape` whose every entry is `value`: what the check at load time evaluates expressions
    on (no memory, no torch), with torch's broadcasting and the same results a real tensor would give."""

    value: Number
    shape: tuple[int, ...]

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


Value: TypeAlias = "Number | Filled | torch.Tensor"


def _is_torch(value: Value) -> TypeIs[torch.Tensor]:
    return not isinstance(value, (int, float, Filled))


def _is_number(value: Value) -> TypeIs[Number]:
    return isinstance(value, (int, float))


def _shape(value: Value) -> tuple[int, ...]:
    return () if _is_number(value) else tuple(value.shape)


def _broadcast(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    width = max(len(s) for s in shapes)
    padded = [(1,) * (width - len(s)) + s for s in shapes]
    result = []
    for sizes in zip(*padded, strict=True):
        wide = {n for n in sizes if n != 1}
        if len(wide) > 1:
            raise ValueError(f"shapes {', '.join(str(s) for s in shapes)} do not broadcast")
        result.append(wide.pop() if wide else 1)
    return tuple(result)


def _scalar(value: Number | Filled) -> Number:
    return value.value if isinstance(value, Filled) else value


def _lookup(name: str, scope: Scope, seen: dict[str, Value]) -> Value:
    if name in scope.dims:
        return scope.dims[name]
    if name in scope.params:
        return scope.params[name]
    if name not in scope.values:
        raise ValueError(f"the case has no dim {name!r} and no input {name!r} was given")
    if name not in seen:
        given = scope.values[name]
        seen[name] = given if isinstance(given, Filled) else given.double() if given.is_floating_point() else given.long()
    return seen[name]


def _has_zero(value: Value) -> bool:
    if _is_torch(value):
        return bool((value == 0).any())
    return _scalar(value) == 0 and (not isinstance(value, Filled) or value.numel > 0)


def _binary(op: ast.operator, left: Value, right: Value) -> Value:
    if isinstance(op, (ast.Div, ast.FloorDiv)) and _has_zero(right):
        raise ValueError(f"division by zero ({'the divisor is 0' if _is_number(right) else 'a divisor holds 0'})")
    if isinstance(op, ast.Pow) and _is_number(right) and abs(right) > MAX_EXPONENT:
        raise ValueError(f"exponent {right} is larger than {MAX_EXPONENT}")
    fn = _BINARY[type(op)]
    try:
        if _is_torch(left) or _is_torch(right):
            return fn(left, right)
        if _is_number(left) and _is_number(right):
            return fn(left, right)
        return Filled(fn(_scalar(left), _scalar(right)), _broadcast(_shape(left), _shape(right)))
    except ZeroDivisionError:
        raise ValueError("division by zero (0 to a negative power)") from None
    except RuntimeError as err:  # torch: shapes that do not broadcast, integers to negative powers
        raise ValueError(str(err).splitlines()[0]) from None


def _reduce(fn: str, value: Value) -> Value:
    if _is_number(value):
        return value
    if (value.numel if isinstance(value, Filled) else value.numel()) == 0 and fn != "sum":
        raise ValueError(f"{fn}() of an empty tensor")
    if isinstance(value, Filled):
        return value.value * value.numel if fn == "sum" else value.value
    reduced = value.sum() if fn == "sum" else value.amin() if fn == "min" else value.amax()
    return reduced.item()


def _elementwise(fn: str, values: list[Value]) -> Value:
    pick = min if fn == "min" else max
    torch_values = [v for v in values if _is_torch(v)]
    if not torch_values:
        scalars = [_scalar(v) for v in values if not _is_torch(v)]
        shapes = [_shape(v) for v in values]
        return pick(scalars) if all(_is_number(v) for v in values) else Filled(pick(scalars), _broadcast(*shapes))
    import torch

    combine = torch.minimum if fn == "min" else torch.maximum
    device = torch_values[0].device
    result = torch.as_tensor(values[0], device=device)
    for value in values[1:]:
        result = combine(result, torch.as_tensor(value, device=device))
    return result


def _call(node: ast.Call, scope: Scope, seen: dict[str, Value]) -> Value:
    assert isinstance(node.func, ast.Name)  # _check made sure
    fn = node.func.id
    if fn in ("numel", "nbytes"):
        arg = node.args[0]
        assert isinstance(arg, ast.Name)
        spec = scope.tensors[arg.id]
        return spec.numel if fn == "numel" else spec.nbytes
    values = [_evaluate(arg, scope, seen) for arg in node.args]
    return _reduce(fn, values[0]) if len(values) == 1 else _elementwise(fn, values)


def _evaluate(node: ast.AST, scope: Scope, seen: dict[str, Value]) -> Value:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body, scope, seen)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return node.value
    if isinstance(node, ast.Name):
        return _lookup(node.id, scope, seen)
    if isinstance(node, ast.BinOp):
        return _binary(node.op, _evaluate(node.left, scope, seen), _evaluate(node.right, scope, seen))
    if isinstance(node, ast.UnaryOp):
        value = _evaluate(node.operand, scope, seen)
        if not isinstance(node.op, ast.USub):
            return value
        return Filled(-value.value, value.shape) if isinstance(value, Filled) else -value
    if isinstance(node, ast.Call):
        return _call(node, scope, seen)
    raise ValueError(f"unsupported syntax {ast.unparse(node)!r}")  # _check refuses it first


def _finish(value: Value) -> int:
    if not _is_number(value):
        raise ValueError(f"evaluates to a tensor of shape {_shape(value)}: reduce it with sum(), min() or max()")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"evaluates to {value}, not a finite number")
    if value < 0:
        raise ValueError(f"evaluates negative ({value:g})")
    return math.floor(value)


def evaluate(expr: str, scope: Scope) -> int:
    """The value of `expr` on one case, rounded down; ValueError naming the problem when there is none."""
    tree = parse(expr)
    _check(tree, scope.names())
    return _finish(_evaluate(tree, scope, {}))


def filled_inputs(tensors: Mapping[str, TensorSpec], fill: Mapping[str, Number]) -> dict[str, Filled]:
    """Every input of `tensors` with each entry equal to `fill[name]` (an integer for an integer dtype)."""
    return {
        name: Filled(float(fill[name]) if spec.dtype in FLOAT_DTYPES else int(fill[name]), spec.shape)
        for name, spec in tensors.items()
        if spec.role != "out"
    }


def dry_run(expr: str, trials: Iterable[tuple[str, Scope]]) -> None:
    """Evaluate `expr` on every (label, scope) of `trials`; ValueError naming the first trial it fails on."""
    tree = parse(expr)
    for label, scope in trials:
        try:
            _check(tree, scope.names())
            _finish(_evaluate(tree, scope, {}))
        except ValueError as err:
            raise ValueError(f"{err} ({label})") from None


# --- the count the judge takes ---------------------------------------------------------------------


def generic_count(tensors: Mapping[str, TensorSpec]) -> RooflineCount:
    """Each read-only input read once and each output written once; in-place (inout) inputs left out, as a
    kernel may touch only part of them (a cache append). 0 flops."""
    read = sorted(n for n, s in tensors.items() if s.role == "in")
    written = sorted(n for n, s in tensors.items() if s.role == "out")
    skipped = sorted(n for n, s in tensors.items() if s.role == "inout")
    total = sum(tensors[n].nbytes for n in read + written)
    explanation = (
        f"generic (the contract declares no roofline): inputs read once ({', '.join(read) or 'none'}) and "
        f"outputs written once ({', '.join(written) or 'none'}) = {total:,} bytes"
        + (f", in-place inputs left out ({', '.join(skipped)})" if skipped else "")
        + ", 0 flops"
    )
    return RooflineCount(bytes=total, flops=0, source="generic", explanation=explanation)


def count_roofline(contract: Subject, dims: Mapping[str, int], inputs: Mapping[str, torch.Tensor], dtype: str) -> RooflineCount:
    """The least bytes and flops of one case (its dims, its real input values, its dtype variant): the
    contract's roofline, or the generic count where it declares none. ContractError when an expression
    cannot be evaluated on this case (unknown name, division by zero, a negative or non-finite value)."""
    try:
        tensors = contract.tensor_specs(dims, dtype)
    except ValueError as err:
        raise ContractError(f"contract {contract.op!r}: cannot size its tensors for dims {dict(dims)}: {err}") from None
    declared = contract.roofline
    if declared is None:
        return generic_count(tensors)
    scope = Scope(dims=dict(dims), params=contract.numeric_params(), tensors=tensors, values=inputs)
    counted: dict[str, int] = {}
    for field in FIELDS:
        try:
            counted[field] = evaluate(getattr(declared, field), scope)
        except ValueError as err:
            raise ContractError(f"contract {contract.op!r}: roofline.{field}: {err} (dims {dict(dims)}, dtype {dtype})") from None
    explanation = (
        f"contract roofline: bytes = {' '.join(declared.bytes.split())} = {counted['bytes']:,}, "
        f"flops = {' '.join(declared.flops.split())} = {counted['flops']:,}"
    )
    return RooflineCount(bytes=counted["bytes"], flops=counted["flops"], source="contract", explanation=explanation)
