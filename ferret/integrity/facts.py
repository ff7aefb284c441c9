"""Per-node facts that rules of several families read: what a call calls, what a store writes into, what
an import imports. Each is a small function of a `ScanContext` and a node.

Where a check is a chain ("a store into an imported module is patching; else one into `outputs` is an
unwritten output; else ..."), the chain is one function here that names the link that applies, and each
rule reports one link. That keeps the first-match order of the chain in one place.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import NamedTuple

from ferret.integrity.astutil import (
    UNKNOWN,
    const_value,
    is_low_dtype_name,
    peel,
    root_name,
    str_value,
)
from ferret.integrity.context import FunctionFacts, ScanContext, shared
from ferret.integrity.tables import (
    ATTR_RULES,
    CONSTANT_FILLS,
    DICT_MUTATORS,
    DTYPE_ROOTS,
    MENTION_RULES,
    lookup,
)

_TIMER_METHODS = ("synchronize", "elapsed_time", "perf_counter", "do_bench", "record", "wait_event")
_INTERPRETER_ROOTS = ("builtins", "sys")


# ------------------------------------------------------------------------------------------------ calls
class CallTarget(NamedTuple):
    """What a call calls: a path through the imports, a bare name, or a method of some object."""

    path: str | None  # through the imports (`F.softmax` -> torch.nn.functional.softmax)
    banned_name: bool  # the path is itself a banned mention, reported where it is named
    builtin: str | None  # a bare name not bound by an import (`open`, `setattr`)
    method: ast.Attribute | None  # `x.softmax` in x.softmax(...) or in getattr(x, "softmax")(...)


@shared
def call_target(ctx: ScanContext, node: ast.Call) -> CallTarget:
    """What `node` calls. A call is judged by the first of: its path through the imports, its bare name,
    its method (each rule family reads the one it knows)."""
    func = node.func
    path = ctx.resolve(func)
    if path is not None:
        banned = lookup(MENTION_RULES, path) is not None
        # builtins.setattr(...) is setattr(...) reached through an import
        name = path.split(".")[1] if path in ("builtins.setattr", "builtins.delattr") and not banned else None
        return CallTarget(path, banned, name, None)
    if isinstance(func, ast.Name):
        return CallTarget(None, False, func.id, None)
    if isinstance(func, ast.Attribute):
        return CallTarget(None, False, None, func)
    if isinstance(func, ast.Call) and isinstance(func.func, ast.Name) and func.func.id == "getattr" and len(func.args) >= 2:
        name = str_value(func.args[1]) or ""
        if name.isidentifier():
            # getattr(x, "softmax")(...) is x.softmax(...)
            return CallTarget(None, False, None, ast.Attribute(value=func.args[0], attr=name, ctx=ast.Load()))
    return CallTarget(None, False, None, None)


@shared
def resolved_calls(ctx: ScanContext) -> list[tuple[ast.Call, str]]:
    """Calls of a path through the imports that is not itself a banned name (that is reported where it
    is named), with the path."""
    targets = [(node, call_target(ctx, node)) for node in ctx.nodes_of(ast.Call)]
    return [(node, t.path) for node, t in targets if t.path is not None and not t.banned_name]


@shared
def _builtin_calls(ctx: ScanContext) -> list[tuple[ast.Call, str]]:
    targets = [(node, call_target(ctx, node).builtin) for node in ctx.nodes_of(ast.Call)]
    return [(node, name) for node, name in targets if name is not None]


def builtin_calls(ctx: ScanContext, *names: str) -> Iterator[tuple[ast.Call, str]]:
    """Calls of these builtins by their bare names (or setattr/delattr through `builtins`), with the name."""
    return ((node, name) for node, name in _builtin_calls(ctx) if name in names)


@shared
def method_calls(ctx: ScanContext) -> list[tuple[ast.Call, ast.Attribute]]:
    """Calls of a method on some object the imports do not name: (call, `obj.method`)."""
    targets = [(node, call_target(ctx, node).method) for node in ctx.nodes_of(ast.Call)]
    return [(node, method) for node, method in targets if method is not None]


def shown_path(node: ast.AST, path: str) -> str:
    """The code as written, with the path it resolves to where that differs (`F.gelu (torch.nn...)`)."""
    shown = ast.unparse(node)
    return shown if shown == path else f"{shown} ({path})"


def is_bitcast(node: ast.Call) -> bool:
    """bitcast=True: the bits are reinterpreted, not rounded to a lower precision."""
    return any(k.arg == "bitcast" and const_value(k.value) is True for k in node.keywords)


def is_low_dtype(ctx: ScanContext, expr: ast.AST) -> bool:
    """`expr` names a dtype below float32 of torch, Triton or NumPy, other than a storage dtype the contract declares."""
    path = ctx.resolve(expr)
    if path is None:
        return False
    root, _, name = path.rpartition(".")
    return root in DTYPE_ROOTS and is_low_dtype_name(name) and name not in ctx.storage_names


@shared
def setattr_kind(ctx: ScanContext, node: ast.Call) -> str | None:
    """What setattr/delattr(obj, name, ...) changes, first match: "interpreter" (builtins, sys), "module"
    (another imported module), "function" (a module-level function), "class" (an object's __class__),
    "tensor_data" (.data or .grad); None otherwise."""
    if not node.args:
        return None
    obj_path = ctx.resolve(node.args[0])
    attr = str_value(node.args[1]) if len(node.args) > 1 else None
    if obj_path is not None:
        return "interpreter" if obj_path.split(".")[0] in _INTERPRETER_ROOTS else "module"
    if isinstance(node.args[0], ast.Name) and node.args[0].id in ctx.top_functions:
        return "function"
    if attr == "__class__":
        return "class"
    return "tensor_data" if attr in ("data", "grad") else None


@shared
def run_method_kind(ctx: ScanContext, node: ast.Call, method: ast.Attribute) -> str | None:
    """What a method call in `run` does to the judge's tensors, first match: "outputs_dict" / "inputs_dict"
    (mutates the dict itself), "output_fill" (fills an output with a constant), "input_inplace" (changes
    an input in place); None otherwise, or outside run."""
    run = ctx.scope(node).run
    if run is None:
        return None
    m, receiver = method.attr, method.value
    if isinstance(receiver, ast.Name) and m in DICT_MUTATORS:
        if receiver.id == run.outputs_param:
            return "outputs_dict"
        if receiver.id == run.inputs_param:
            return "inputs_dict"
    root = root_name(receiver)
    if root is not None and root in run.outputs and m in CONSTANT_FILLS:
        return "output_fill"
    inplace = m.endswith("_") and not m.endswith("__")
    return "input_inplace" if root is not None and root in run.inputs and inplace else None


# ----------------------------------------------------------------------------------------------- stores
class Store(NamedTuple):
    """One target of an assignment, augmented assignment or `del`."""

    stmt: ast.AST  # the statement, which the walk examines for all its targets
    target: ast.Attribute | ast.Subscript
    value: ast.AST | None  # what is stored, where the target receives it whole
    augmented: bool


@shared
def stores(ctx: ScanContext) -> list[Store]:
    """Attribute and subscript targets of every store, in walk order; elements of a tuple target get no
    value of their own, and a starred target counts as what it stars."""
    return list(_stores(ctx))


def _stores(ctx: ScanContext) -> Iterator[Store]:
    for stmt in ctx.nodes_of(ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Delete):
        if isinstance(stmt, ast.Assign):
            pairs = [(t, stmt.value) for t in stmt.targets]
        elif isinstance(stmt, ast.Delete):
            pairs = [(t, None) for t in stmt.targets]
        else:
            pairs = [(stmt.target, stmt.value)] if stmt.value is not None else []
        for target, value in pairs:
            yield from _targets(stmt, target, value, isinstance(stmt, ast.AugAssign))


def _targets(stmt: ast.AST, target: ast.AST, value: ast.AST | None, augmented: bool) -> Iterator[Store]:
    if isinstance(target, (ast.Tuple, ast.List)):
        for elt in target.elts:
            yield from _targets(stmt, elt, None, augmented)
        return
    if isinstance(target, ast.Starred):
        target = target.value
    if isinstance(target, (ast.Attribute, ast.Subscript)):
        yield Store(stmt, target, value, augmented)


@shared
def attribute_store_kind(ctx: ScanContext, store: Store) -> str | None:
    """What `obj.attr = ...` (or `del obj.attr`) changes, first match: "precision_flag" (allow_tf32 and
    kin), "class_swap" (__class__), "interpreter" / "module" (an attribute of an imported module: of the
    interpreter's module table or import path, or another), "timer" (a timer's method), "function" (an
    attribute of a module-level function), "input_data" / "output_data" (.data/.grad/.storage of a
    tensor of run's inputs or outputs); None otherwise."""
    target = store.target
    if not isinstance(target, ast.Attribute):
        return None
    attr = target.attr
    if attr in ATTR_RULES and ATTR_RULES[attr][0] == "lower_precision":
        return "precision_flag"
    if attr == "__class__":
        return "class_swap"
    base_path = ctx.resolve(target.value)
    if base_path is not None:
        hit = lookup(MENTION_RULES, f"{base_path}.{attr}")
        interpreter = base_path.split(".")[0] in _INTERPRETER_ROOTS or (hit is not None and hit[1] == "shadowing")
        return "interpreter" if interpreter else "module"
    if attr in _TIMER_METHODS:
        return "timer"
    if isinstance(target.value, ast.Name) and target.value.id in ctx.top_functions:
        return "function"
    run, root = ctx.scope(store.stmt).run, root_name(target.value)
    if run is None or root is None or attr not in ("data", "grad", "storage"):
        return None
    return "input_data" if root in run.inputs else "output_data" if root in run.outputs else None


@shared
def subscript_store_kind(ctx: ScanContext, store: Store) -> str | None:
    """What `obj[i] = ...` (or `del`, `+=`) changes, first match: "interpreter" / "module" (state of an
    imported module), "outputs_entry" / "inputs_entry" (an entry of run's dicts), "input_write" (an input
    tensor), "output_constant" / "output_copy" (an output tensor, with a literal or anything else),
    "counter" / "argument_kept" (a module-level container, from its own value or with an argument);
    None otherwise."""
    target = store.target
    if not isinstance(target, ast.Subscript):
        return None
    base, scope = target.value, ctx.scope(store.stmt)
    base_path = ctx.resolve(base)
    if base_path is not None:
        hit = lookup(MENTION_RULES, base_path)
        shadowing = (hit is not None and hit[1] == "shadowing") or base_path.startswith(_INTERPRETER_ROOTS)
        return "interpreter" if shadowing else "module"
    run, root = scope.run, root_name(base)
    if run is not None and isinstance(base, ast.Name) and base.id in (run.outputs_param, run.inputs_param):
        return "outputs_entry" if base.id == run.outputs_param else "inputs_entry"
    if run is not None and root is not None and (root in run.inputs or root in run.outputs):
        if root in run.inputs:
            return "input_write"
        return "output_constant" if _is_literal(store.value) else "output_copy"
    return _container_store_kind(ctx, store, scope.fn) if scope.fn is not None else None


def _is_literal(value: ast.AST | None) -> bool:
    return isinstance(value, (ast.Constant, ast.UnaryOp)) and const_value(value) is not UNKNOWN


def _container_store_kind(ctx: ScanContext, store: Store, fn: FunctionFacts) -> str | None:
    base, value = store.target.value, store.value
    if not (isinstance(base, ast.Name) and base.id in ctx.containers):
        return None
    reads_itself = value is not None and any(isinstance(n, ast.Name) and n.id == base.id for n in ast.walk(value))
    if store.augmented or reads_itself:
        return "counter"
    return "argument_kept" if value is not None and ctx.holds_arguments(value, fn) else None


# ---------------------------------------------------------------------------------------------- imports
class Imported(NamedTuple):
    """One path an import statement (or `__import__("...")`) brings in."""

    node: ast.AST  # the statement or call
    path: str
    step: int  # its place among the statement's paths: the module first, then each imported name
    from_module: str | None  # for `from m import name`: m (the path is m.name); None for a module


@shared
def imported(ctx: ScanContext) -> list[Imported]:
    """Every absolute import's paths, and those of `__import__` with a literal name, in walk order."""
    return list(_imported(ctx))


def _imported(ctx: ScanContext) -> Iterator[Imported]:
    for node in ctx.nodes_of(ast.Import, ast.ImportFrom, ast.Call):
        if isinstance(node, ast.Import):
            for i, a in enumerate(node.names):
                yield Imported(node, a.name, i, None)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                continue  # a relative import is reported as such and nothing else
            module = node.module or ""
            yield Imported(node, module, 0, None)
            for i, a in enumerate(node.names):
                if a.name != "*":
                    yield Imported(node, f"{module}.{a.name}", i + 1, module)
        elif call_target(ctx, node).builtin == "__import__" and node.args and (name := str_value(node.args[0])) is not None:
            yield Imported(node, name, 0, None)


# -------------------------------------------------------------------------------------------- literals
def int_literals(ctx: ScanContext, expr: ast.AST) -> list[tuple[ast.AST, int]]:
    """Integer literals in `expr` (or in its tuple/list/set elements), and names bound once to one."""
    out = []
    for e in peel(expr):
        if isinstance(e, ast.Constant) and type(e.value) is int:
            out.append((e, e.value))
        elif isinstance(e, ast.Name) and e.id in ctx.int_constants:
            out.append((e, ctx.int_constants[e.id]))
    return out


def string_of(ctx: ScanContext, node: ast.Constant) -> str | None:
    """The text of a string or bytes literal that is not a docstring."""
    if id(node) in ctx.docstrings:
        return None
    value = node.value
    if isinstance(value, bytes):
        value = value.decode("latin-1")
    return value if isinstance(value, str) else None
