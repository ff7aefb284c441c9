"""Mutants of an honest candidate: small semantic changes made by AST operators suited to kernels, each applied
at one site, and conditional variants of each (the change taken only for some calls), which is what a gate's
fixed case list misses.

An operator is a function of one node that returns the replacements it offers there (`Offer`: a label and a
builder of the new node). `sites(tree)` numbers every offer over the module in a fixed walk order, so a mutant is
(operator, site) and is made again the same way from the same source. Nodes under a decorator, an annotation, a
`raise`, an `assert` or an f-string are left alone: mutating them changes no kernel's arithmetic.
"""

from __future__ import annotations

import ast
import copy
import difflib
import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from ferret.audit.models import Mutant
from ferret.errors import UsageError
from ferret.syntax import parse_module

Builder = Callable[[], ast.expr | ast.stmt]


@dataclass(frozen=True)
class Offer:
    label: str
    build: Builder


Matcher = Callable[[ast.AST, "_Where"], list[Offer]]


@dataclass(frozen=True)
class _Where:
    """Where a node sits: inside a `for` loop, and the names assigned before it in its function, in order."""

    in_loop: bool
    assigned_before: tuple[str, ...]


@dataclass(frozen=True)
class Operator:
    name: str
    description: str
    match: Matcher


# --- the operators: one function each -----------------------------------------------------------------------


def _number(value: float | int) -> ast.expr:
    node = ast.Constant(value=abs(value))
    return ast.UnaryOp(op=ast.USub(), operand=node) if value < 0 else node


def _scaled(node: ast.expr, factor: float) -> ast.expr:
    return ast.BinOp(left=copy.deepcopy(node), op=ast.Mult(), right=ast.Constant(value=factor))


def constant(node: ast.AST, where: _Where) -> list[Offer]:
    """Numeric constants perturbed: a float scaled by 2 or by 1.01 (0.0 becomes 1.0), an integer one up or one
    down, a contract parameter (`params[...]`) scaled by 2 or 1.01 (eps, theta, a softmax scale)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, float):
        if node.value == 0.0:
            return [Offer("0.0 -> 1.0", lambda: ast.Constant(value=1.0))]
        v = node.value
        return [Offer(f"{v!r} -> {v * 2!r}", lambda: _number(v * 2)), Offer(f"{v!r} -> {v * 1.01!r}", lambda: _number(v * 1.01))]
    if isinstance(node, ast.Constant) and type(node.value) is int:
        v = node.value
        return [Offer(f"{v} -> {v + 1}", lambda: _number(v + 1)), Offer(f"{v} -> {v - 1}", lambda: _number(v - 1))]
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "params":
        text = ast.unparse(node)
        return [
            Offer(f"{text} * 2", lambda: _scaled(node, 2.0)),
            Offer(f"{text} * 1.01", lambda: _scaled(node, 1.01)),
        ]
    return []


_FLIPPED: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
}


def comparison(node: ast.AST, where: _Where) -> list[Offer]:
    """A comparison (a mask, a loop or branch bound) flipped (< to <=, == to !=) or its right side one off."""
    if not isinstance(node, ast.Compare) or len(node.ops) != 1:
        return []
    op = type(node.ops[0])
    offers = []
    if op in _FLIPPED:
        flipped = _FLIPPED[op]

        def flip() -> ast.expr:
            return ast.Compare(left=copy.deepcopy(node.left), ops=[flipped()], comparators=copy.deepcopy(node.comparators))

        offers.append(Offer(f"{op.__name__} -> {flipped.__name__}", flip))
    if op in (ast.Lt, ast.LtE, ast.Gt, ast.GtE):
        for delta, sign in ((-1, ast.Sub), (1, ast.Add)):

            def shifted(sign: type[ast.operator] = sign) -> ast.expr:
                right = ast.BinOp(left=copy.deepcopy(node.comparators[0]), op=sign(), right=ast.Constant(value=1))
                return ast.Compare(left=copy.deepcopy(node.left), ops=[op()], comparators=[right])

            offers.append(Offer(f"right side {delta:+d}", shifted))
    return offers


def drop_term(node: ast.AST, where: _Where) -> list[Offer]:
    """An additive or multiplicative term dropped: a + b to a or b, a - b to a, a * b to a or b, a / b to a."""
    if not isinstance(node, ast.BinOp) or not isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.Div)):
        return []
    offers = [Offer("right term dropped", lambda: copy.deepcopy(node.left))]
    if isinstance(node.op, (ast.Add, ast.Mult)):
        offers.append(Offer("left term dropped", lambda: copy.deepcopy(node.right)))
    return offers


_WIDE = ("float32", "float64")


def cast16(node: ast.AST, where: _Where) -> list[Offer]:
    """An accumulator or intermediate held in 16 bits: `tl.float32` / `torch.float32` as float16 or bfloat16."""
    if not (isinstance(node, ast.Attribute) and node.attr in _WIDE and isinstance(node.value, ast.Name)):
        return []
    base = node.value.id
    return [
        Offer(
            f"{base}.{node.attr} -> {base}.{narrow}",
            lambda narrow=narrow: ast.Attribute(value=ast.Name(id=base, ctx=ast.Load()), attr=narrow, ctx=ast.Load()),
        )
        for narrow in ("float16", "bfloat16")
    ]


def swap(node: ast.AST, where: _Where) -> list[Offer]:
    """Two operands swapped: a - b as b - a, a / b as b / a, and two neighbouring plain names passed to a call."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Sub, ast.Div)):
        return [
            Offer(
                "operands swapped", lambda: ast.BinOp(left=copy.deepcopy(node.right), op=node.op, right=copy.deepcopy(node.left))
            )
        ]
    if not isinstance(node, ast.Call):
        return []
    offers = []
    args = node.args
    for i in range(len(args) - 1):
        a, b = args[i], args[i + 1]
        if isinstance(a, ast.Name) and isinstance(b, ast.Name) and a.id != b.id:

            def swapped(i: int = i) -> ast.expr:
                new = copy.deepcopy(node)
                new.args[i], new.args[i + 1] = new.args[i + 1], new.args[i]
                return new

            offers.append(Offer(f"arguments {a.id} and {b.id} swapped", swapped))
    return offers


def _call_name(node: ast.Call) -> str:
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def range_cut(node: ast.AST, where: _Where) -> list[Offer]:
    """A loop or block range cut short: range's end one step early, cdiv(a, b) as a // b (the partial last block
    dropped), next_power_of_2(n) halved, a launch grid's first size one short."""
    if isinstance(node, ast.Call) and _call_name(node) == "range" and node.args:
        end = 1 if len(node.args) > 1 else 0
        step = node.args[2] if len(node.args) > 2 else ast.Constant(value=1)

        def cut() -> ast.expr:
            new = copy.deepcopy(node)
            new.args[end] = ast.BinOp(left=new.args[end], op=ast.Sub(), right=copy.deepcopy(step))
            return new

        return [Offer("range ends one step early", cut)]
    if isinstance(node, ast.Call) and _call_name(node) == "cdiv" and len(node.args) == 2:
        return [
            Offer(
                "cdiv(a, b) -> a // b",
                lambda: ast.BinOp(left=copy.deepcopy(node.args[0]), op=ast.FloorDiv(), right=copy.deepcopy(node.args[1])),
            )
        ]
    if isinstance(node, ast.Call) and _call_name(node) == "next_power_of_2":
        return [
            Offer(
                "next_power_of_2 halved",
                lambda: ast.BinOp(left=copy.deepcopy(node), op=ast.FloorDiv(), right=ast.Constant(value=2)),
            )
        ]
    launch = node.func if isinstance(node, ast.Call) else None
    if (
        isinstance(launch, ast.Subscript)
        and isinstance(launch.slice, ast.Tuple)
        and launch.slice.elts
        and isinstance(launch.value, ast.Name)
    ):
        call = node
        assert isinstance(call, ast.Call)

        def grid() -> ast.expr:
            new = copy.deepcopy(call)
            assert isinstance(new.func, ast.Subscript) and isinstance(new.func.slice, ast.Tuple)
            first = new.func.slice.elts[0]
            new.func.slice.elts[0] = ast.BinOp(left=first, op=ast.Sub(), right=ast.Constant(value=1))
            return new

        return [Offer("launch grid one program short", grid)]
    return []


def partial_reduction(node: ast.AST, where: _Where) -> list[Offer]:
    """A partial reduction: a sum missing its largest term (`m.sum(x, ...)` - `m.max(x, ...)`), or a loop's
    running `acc += v` kept as its last block only (`acc = v`)."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "sum" and node.args:
        module = node.func.value
        if isinstance(module, ast.Name) and module.id in ("tl", "torch"):

            def short() -> ast.expr:
                largest = copy.deepcopy(node)
                assert isinstance(largest.func, ast.Attribute)
                largest.func.attr = "max"
                return ast.BinOp(left=copy.deepcopy(node), op=ast.Sub(), right=largest)

            return [Offer(f"{module.id}.sum without its largest term", short)]
    if isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Add) and where.in_loop:
        return [
            Offer(
                "running sum kept as the last block only",
                lambda: ast.Assign(targets=[copy.deepcopy(node.target)], value=copy.deepcopy(node.value), lineno=node.lineno),
            )
        ]
    return []


def stale_stage(node: ast.AST, where: _Where) -> list[Offer]:
    """A stage's result reused where a later one is needed: a name read in place of the one assigned just before it
    (in the same function)."""
    if not isinstance(node, ast.Name) or not isinstance(node.ctx, ast.Load) or node.id not in where.assigned_before:
        return []
    before = where.assigned_before[: where.assigned_before.index(node.id)]
    earlier = next((name for name in reversed(before) if name != node.id), None)
    if earlier is None:
        return []
    return [Offer(f"{node.id} read as {earlier}", lambda: ast.Name(id=earlier, ctx=ast.Load()))]


OPERATORS: tuple[Operator, ...] = (
    Operator("constant", "a numeric constant or contract parameter perturbed", constant),
    Operator("comparison", "a comparison flipped or one off", comparison),
    Operator("drop_term", "an additive or multiplicative term dropped", drop_term),
    Operator("cast16", "an accumulator or intermediate in 16 bits", cast16),
    Operator("swap", "two operands swapped", swap),
    Operator("range_cut", "a loop, block or grid range cut short", range_cut),
    Operator("partial_reduction", "a reduction over part of its terms", partial_reduction),
    Operator("stale_stage", "an earlier stage's value used for a later one", stale_stage),
)
OPERATOR_NAMES = tuple(o.name for o in OPERATORS)


def operator(name: str) -> Operator:
    found = next((o for o in OPERATORS if o.name == name), None)
    if found is None:
        raise UsageError(f"no mutation operator {name!r}; the operators are {', '.join(OPERATOR_NAMES)}")
    return found


# --- the walk ----------------------------------------------------------------------------------------------

_SKIPPED_FIELDS = {"decorator_list", "annotation", "returns", "type_comment"}
_SKIPPED_NODES = (ast.Raise, ast.Assert, ast.JoinedStr, ast.Import, ast.ImportFrom)

Position = tuple[ast.AST, str, int | None, ast.AST]  # (parent, field, index in a list field or None, node)


def _positions(node: ast.AST, where: _Where) -> Iterator[tuple[Position, _Where]]:
    """Every mutable node under `node` with where it sits, in a fixed order (fields in order, depth first)."""
    assigned = list(where.assigned_before)
    for field, value in ast.iter_fields(node):
        if field in _SKIPPED_FIELDS:
            continue
        children = list(enumerate(value)) if isinstance(value, list) else [(None, value)]
        for index, child in children:
            if not isinstance(child, ast.AST) or isinstance(child, _SKIPPED_NODES) or _is_docstring(child):
                continue
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                inner = _Where(False, tuple(a.arg for a in child.args.args))
            else:
                inner = _Where(where.in_loop or isinstance(node, (ast.For, ast.While)) and field == "body", tuple(assigned))
            yield (node, field, index, child), inner
            yield from _positions(child, inner)
            if isinstance(child, ast.Assign) and len(child.targets) == 1 and isinstance(child.targets[0], ast.Name):
                assigned.append(child.targets[0].id)


def _is_docstring(node: ast.AST) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)


def sites(tree: ast.Module, op: Operator) -> list[tuple[int, str, int]]:
    """(position number, offer label, line) of every offer `op` makes over the module."""
    return [(number, offer.label, line) for number, offer, _, line in _offers(tree, op)]


def _offers(tree: ast.Module, op: Operator) -> Iterator[tuple[int, Offer, ast.AST, int]]:
    """(position number, offer, the node it replaces, line) of every offer `op` makes over the module."""
    for number, (position, where) in enumerate(_positions(tree, _Where(False, ()))):
        node = position[3]
        for offer in op.match(node, where):
            yield number, offer, node, getattr(node, "lineno", 0)


def _replace(tree: ast.Module, op: Operator, number: int, label: str) -> ast.Module:
    """A copy of the module with the offer `label` of `op` taken at position `number`."""
    new = copy.deepcopy(tree)
    for at, ((parent, field, index, node), where) in enumerate(_positions(new, _Where(False, ()))):
        if at != number:
            continue
        offer = next(o for o in op.match(node, where) if o.label == label)
        replacement = ast.copy_location(offer.build(), node)
        if index is None:
            setattr(parent, field, replacement)
        else:
            getattr(parent, field)[index] = replacement
        return ast.fix_missing_locations(new)
    raise ValueError(f"no position {number} in the module")


# --- conditional variants ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Condition:
    name: str
    description: str
    test: str  # a Python expression over `inputs`, the candidate's inputs dict


def conditions(size_threshold: int) -> tuple[Condition, ...]:
    """Conditions a conditional mutant takes its change under; `size_threshold` splits the audit's own cases."""
    return (
        Condition(
            "above_size",
            f"only when an input has more than {size_threshold} elements",
            f"max(t.numel() for t in inputs.values()) > {size_threshold}",
        ),
        Condition(
            "some_requests", "only when the first input's leading size is odd", "next(iter(inputs.values())).shape[0] % 2 == 1"
        ),
        Condition(
            "full_length",
            "only when the first input's last size is a multiple of 16 (no masked tail)",
            "next(iter(inputs.values())).shape[-1] % 16 == 0",
        ),
    )


def _top_level_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return names


def _suffixed(tree: ast.Module, suffix: str) -> list[ast.stmt]:
    """The module's statements with its top-level names (and every reference to them) suffixed, so two copies of
    one module live side by side; `from __future__` imports are left out (they go first, once)."""
    names = _top_level_names(tree)
    new = copy.deepcopy(tree)
    for node in ast.walk(new):
        if isinstance(node, ast.Name) and node.id in names:
            node.id += suffix
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name in names:
            node.name += suffix
    return [s for s in new.body if not (isinstance(s, ast.ImportFrom) and s.module == "__future__") and not _is_docstring(s)]


def conditional_source(honest: ast.Module, mutated: ast.Module, condition: Condition) -> str:
    """One module holding the honest candidate and the mutant side by side, and a `run` that calls the mutant's
    only when `condition` holds for the call's inputs."""
    dispatch = parse_module(
        # No `return`: the ABI writes outputs in place, and a `run` returning a value is the static scan's
        # `unwritten_output`, which would reject every conditional mutant whatever its numbers.
        "def run(inputs, outputs, params, trace=None):\n"
        f"    if {condition.test}:\n"
        "        run__mutant(inputs, outputs, params, trace)\n"
        "    else:\n"
        "        run__honest(inputs, outputs, params, trace)\n"
    )
    module = ast.Module(
        body=[ast.ImportFrom(module="__future__", names=[ast.alias(name="annotations")], level=0)]
        + _suffixed(honest, "__honest")
        + _suffixed(mutated, "__mutant")
        + dispatch.body,
        type_ignores=[],
    )
    return ast.unparse(ast.fix_missing_locations(module)) + "\n"


# --- mutants ---------------------------------------------------------------------------------------------------


def _diff(before: str, after: str, name: str) -> str:
    lines = difflib.unified_diff(before.splitlines(), after.splitlines(), f"a/{name}", f"b/{name}", n=1, lineterm="")
    return "\n".join(lines)


class MadeMutant:
    """A mutant of the honest candidate: its record and its source. Planning a mutant is cheap and building it is
    not (a copy of the whole module, unparsed, beside the honest one for a conditional mutant), and a large candidate
    offers tens of thousands: the audit classes a sample, so the source and the diff are built when first read."""

    def __init__(self, plan: _Plan, condition: Condition | None) -> None:
        self._plan, self._condition = plan, condition
        base = plan.base_id
        self.id = base if condition is None else f"{base}-{condition.name}"
        self.operator = plan.op.name

    @functools.cached_property
    def mutant(self) -> Mutant:
        plan, cond = self._plan, self._condition
        return Mutant(
            id=self.id,
            operator=self.operator,
            condition=None if cond is None else cond.name,
            line=plan.line,
            description=plan.label if cond is None else f"{plan.label}, {cond.description}",
            diff=plan.diff,
        )

    @functools.cached_property
    def source(self) -> str:
        if self._condition is None:
            return self._plan.text + "\n"
        return conditional_source(self._plan.tree, self._plan.mutated, self._condition)


class _Plan:
    """One offer of one operator at one site, and (built once, shared by its conditional mutants) the mutated
    module, its text and its diff."""

    def __init__(self, tree: ast.Module, plain: str, name: str, op: Operator, site: tuple[int, str, int], offer: int):
        self.tree, self.plain, self.name, self.op = tree, plain, name, op
        self.number, self.label, self.line = site
        self.base_id = f"{op.name}-{self.number:04d}{chr(ord('a') + offer)}-{_slug(self.label)}"

    @functools.cached_property
    def mutated(self) -> ast.Module:
        return _replace(self.tree, self.op, self.number, self.label)

    @functools.cached_property
    def text(self) -> str:
        return ast.unparse(self.mutated)

    @functools.cached_property
    def diff(self) -> str:
        return _diff(self.plain, self.text, self.name)


def make_mutants(source: str, name: str, operators: tuple[Operator, ...], size_threshold: int) -> list[MadeMutant]:
    """Every mutant the operators make of `source` (a candidate file named `name`), plain and conditional, planned
    and built when read (`MadeMutant`). An offer whose replacement reads as the node it replaces changes nothing and
    makes no mutant. The diff is against the honest source as ast.unparse writes it, so that it shows the change
    alone."""
    tree = parse_module(source)
    plain = ast.unparse(tree)
    made: list[MadeMutant] = []
    for op in operators:
        offered: dict[int, int] = {}
        for number, offer, node, line in _offers(tree, op):
            if ast.unparse(offer.build()) == ast.unparse(node):
                continue
            plan = _Plan(tree, plain, name, op, (number, offer.label, line), offered.get(number, 0))
            offered[number] = offered.get(number, 0) + 1  # which of the site's offers (0 -> 1 and 0 -> -1)
            made.append(MadeMutant(plan, None))
            made += [MadeMutant(plan, cond) for cond in conditions(size_threshold)]
    return made


def _slug(label: str) -> str:
    kept = "".join(c if c.isalnum() else "_" for c in label.lower())
    return "_".join(p for p in kept.split("_") if p)[:40]
