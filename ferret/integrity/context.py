"""Facts about a parsed candidate that several rules need, computed once before any rule runs.

A `ScanContext` holds the module's AST and source lines, what its names stand for through its imports
(`F` -> `torch.nn.functional`), its @triton.jit functions, its module-level functions, containers and
integer constants, the contract's case dims, and the walk: every node the scan looks at, in the order
it looks at them, each with the functions it sits in. Rules only read a context; nothing here imports
or runs the candidate.
"""

from __future__ import annotations

import ast
import functools
import sys
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from ferret.integrity.astutil import names_in, peel, root_name, str_value
from ferret.integrity.tables import (
    CONTAINER_CALLS,
    FLOAT8_NAMES,
    IGNORED_SHAPE_LITERALS,
    JIT_DECORATORS,
)

FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_OUTER = (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
# Nodes no rule looks at; they are shared between parents (one ast.Load for a whole tree), so they have
# no place of their own in the walk.
_SHARED = (ast.expr_context, ast.operator, ast.boolop, ast.unaryop, ast.cmpop)
_Fact = TypeVar("_Fact", bound=Callable[..., Any])
_Node = TypeVar("_Node", bound=ast.AST)


class FunctionFacts:
    """What the rules know about one function: whether it is a Triton kernel or the `run` entry, and
    which of its names hold its arguments (and, in run, the inputs and outputs) or views of them."""

    def __init__(self, node: FunctionNode, jit: bool, is_run: bool):
        self.node = node
        self.jit = jit
        self.is_run = is_run
        positional = [a.arg for a in node.args.posonlyargs + node.args.args]
        params = positional + [a.arg for a in node.args.kwonlyargs]
        params += [a.arg for a in (node.args.vararg, node.args.kwarg) if a is not None]
        self.inputs_param = positional[0] if is_run and positional else None
        self.outputs_param = positional[1] if is_run and len(positional) >= 2 else None
        binds = _bindings(node)
        self.derived = derive(binds, set(params))  # names holding the arguments or views of them
        self.inputs = derive(binds, {self.inputs_param}) if self.inputs_param else set()
        self.outputs = derive(binds, {self.outputs_param}) if self.outputs_param else set()


class Scope(tuple):
    """The functions a node sits in, outermost first (class bodies and lambdas do not count)."""

    @property
    def fn(self) -> FunctionFacts | None:
        """The innermost function, if any."""
        return self[-1] if self else None

    @property
    def in_jit(self) -> bool:
        """Inside a @triton.jit function (or a function nested in one)."""
        return any(f.jit for f in self)

    @property
    def run(self) -> FunctionFacts | None:
        """The `run` entry, when the node sits in it (however deeply nested)."""
        return self[0] if self and self[0].is_run else None


class ScanContext:
    """One parsed candidate and the facts the rules share."""

    def __init__(self, source: str, tree: ast.Module, shape_constants: Iterable[int], storage_dtypes: Iterable[str] = ()):
        self.lines = source.splitlines()
        # The low dtype names the contract's storage allows (`FLOAT8_NAMES` of its float8 inputs): no downcast there.
        self.storage_names = frozenset(name for dtype in storage_dtypes for name in FLOAT8_NAMES.get(dtype, ()))
        self.tree = tree
        self.everything = list(ast.walk(tree))  # breadth-first, for facts that keep the first or last found
        self.memo: dict[tuple, Any] = {}
        # 0, 1 and 2 are too common (ranks, strides, halves) to mean a test case.
        self.shape_constants = frozenset(shape_constants) - IGNORED_SHAPE_LITERALS
        self.docstrings = _docstrings(self.everything)
        self.aliases = _import_aliases(self.everything)
        _add_assigned_aliases(self)
        self.jit_defs = {id(n) for n in self.everything if isinstance(n, _FUNCTIONS) and _is_jit(self, n)}
        self.top_functions: dict[str, FunctionNode] = {}
        self.containers: set[str] = set()
        self.int_constants: dict[str, int] = {}
        _module_bindings(self)
        self.nodes: list[ast.AST] = []
        self.order: dict[int, int] = {}
        self.scopes: dict[int, Scope] = {}
        self.by_type: dict[type, list[ast.AST]] = {}
        _walk(self)

    def resolve(self, expr: ast.AST) -> str | None:
        """The dotted path an expression names through the module's imports (`F.softmax` ->
        `torch.nn.functional.softmax`), or None when it does not go through an import."""
        if isinstance(expr, ast.Name):
            return self.aliases.get(expr.id)
        if isinstance(expr, ast.Attribute):
            base = self.resolve(expr.value)
            return f"{base}.{expr.attr}" if base else None
        if isinstance(expr, ast.Call):
            func, args = expr.func, expr.args
            getattr_name = str_value(args[1]) if len(args) >= 2 else None
            if isinstance(func, ast.Name) and func.id == "getattr" and getattr_name is not None:
                base = self.resolve(args[0])
                return f"{base}.{getattr_name}" if base else None
            module = str_value(args[0]) if args else None
            if module is not None:
                if isinstance(func, ast.Name) and func.id == "__import__":
                    return module.split(".")[0]
                if self.resolve(func) == "importlib.import_module":
                    return module
        return None

    def scope(self, node: ast.AST) -> Scope:
        """The functions around `node` as the walk found it."""
        return self.scopes[id(node)]

    def nodes_of(self, *kinds: type[_Node]) -> list[_Node]:
        """The walked nodes of these exact types, in walk order."""
        key = ("nodes_of", *kinds)
        if key not in self.memo:
            if len(kinds) == 1:
                found = self.by_type.get(kinds[0], [])
            else:
                found = [n for t in dict.fromkeys(kinds) for n in self.by_type.get(t, ())]
                found.sort(key=lambda n: self.order[id(n)])
            # by_type is keyed by each node's exact type, so this keeps every node: it only tells the
            # checker what the list holds.
            self.memo[key] = [n for n in found if isinstance(n, kinds)]
        return self.memo[key]

    def holds_arguments(self, value: ast.AST, fn: FunctionFacts) -> bool:
        """`value` is (a display of) an argument of `fn` or a view of one."""
        return any(root_name(e) in fn.derived for e in peel(value))


# ------------------------------------------------------------------------------------------------ facts
def shared(fact: _Fact) -> _Fact:
    """Compute a fact once per context: several rules ask for it. Its arguments after the context are
    nodes of the tree (or facts holding them), told apart by identity."""

    @functools.wraps(fact)
    def once(ctx: ScanContext, *nodes: Any) -> Any:
        key = (fact, *map(id, nodes))
        if key not in ctx.memo:
            ctx.memo[key] = fact(ctx, *nodes)
        return ctx.memo[key]

    return once  # type: ignore[return-value]


def _docstrings(everything: list[ast.AST]) -> set[int]:
    """Docstring constants: prose, not code, so string rules skip them."""
    found = set()
    for node in everything:
        if isinstance(node, _OUTER) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and str_value(first.value) is not None:
                found.add(id(first.value))
    return found


def _import_aliases(everything: list[ast.AST]) -> dict[str, str]:
    """Local name -> dotted path, from every import in the file (a later import in walk order wins)."""
    aliases: dict[str, str] = {}
    for node in everything:
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.asname:
                    aliases[a.asname] = a.name
                else:  # `import torch.nn` binds `torch`
                    top = a.name.split(".")[0]
                    aliases[top] = top
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for a in node.names:
                if a.name != "*":
                    aliases[a.asname or a.name] = f"{node.module}.{a.name}"
    return aliases


def _add_assigned_aliases(ctx: ScanContext) -> None:
    """Names bound to a module or to something reached through one (`sm = torch.softmax`), to a
    fixpoint; a name keeps the first path it is found bound to."""
    assigns = [n for n in ctx.everything if isinstance(n, ast.Assign)]
    for _ in range(8):
        changed = False
        for node in assigns:
            path = ctx.resolve(node.value)
            if path is None:
                continue
            for target in node.targets:
                if isinstance(target, ast.Name) and target.id not in ctx.aliases:
                    ctx.aliases[target.id] = path
                    changed = True
        if not changed:
            break


def _is_jit(ctx: ScanContext, node: FunctionNode) -> bool:
    for dec in node.decorator_list:
        target = dec.func if isinstance(dec, ast.Call) else dec
        if ctx.resolve(target) in JIT_DECORATORS:
            return True
    return False


def _is_container(ctx: ScanContext, value: ast.AST | None) -> bool:
    if isinstance(value, (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)):
        return True
    if isinstance(value, ast.Call):
        name = ctx.resolve(value.func) or (value.func.id if isinstance(value.func, ast.Name) else None)
        return name in CONTAINER_CALLS
    return False


def _module_bindings(ctx: ScanContext) -> None:
    """Module-level functions, mutable containers and int constants (names bound once, there, to an int
    literal stand for that int where they are compared)."""
    stores: dict[str, int] = {}
    for n in ctx.everything:
        if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
            stores[n.id] = stores.get(n.id, 0) + 1
    for stmt in ctx.tree.body:
        if isinstance(stmt, _FUNCTIONS):
            ctx.top_functions[stmt.name] = stmt
        targets, value = [], None
        if isinstance(stmt, ast.Assign):
            targets, value = stmt.targets, stmt.value
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            targets, value = [stmt.target], stmt.value
        for target in targets:
            if not isinstance(target, ast.Name):
                continue
            if _is_container(ctx, value):
                ctx.containers.add(target.id)
            if isinstance(value, ast.Constant) and type(value.value) is int and stores.get(target.id) == 1:
                ctx.int_constants[target.id] = value.value


def derive(binds: list[tuple[ast.AST, ast.AST]], seeds: set[str]) -> set[str]:
    """Names that hold `seeds` or views, items or attributes of them, through a function's bindings
    (flow-insensitive)."""
    names = set(seeds)
    if not names:
        return names

    def holds(value: ast.AST) -> bool:
        return any(root_name(e) in names for e in peel(value))

    for _ in range(10):
        before = len(names)
        for target, value in binds:
            if (
                isinstance(target, (ast.Tuple, ast.List))
                and isinstance(value, (ast.Tuple, ast.List))
                and len(target.elts) == len(value.elts)
            ):
                for t, v in zip(target.elts, value.elts, strict=True):  # lengths checked above
                    if holds(v):
                        names.update(names_in(t))
            elif holds(value):
                names.update(names_in(target))
        if len(names) == before:
            break
    return names


def _bindings(func: ast.AST) -> list[tuple[ast.AST, ast.AST]]:
    """(target, value) of every binding in `func`: assignments, loops, comprehensions, `with ... as`."""
    binds: list[tuple[ast.AST, ast.AST]] = []
    for node in ast.walk(func):
        if isinstance(node, ast.Assign):
            binds += [(t, node.value) for t in node.targets]
        elif isinstance(node, (ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
            binds.append((node.target, node.value))
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
            binds.append((node.target, node.iter))
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            binds.append((node.optional_vars, node.context_expr))
    return binds


# ------------------------------------------------------------------------------------------------ walk
# The walk needs no recursion, but the scan must still give up on a candidate nested too deeply to follow
# (one `syntax_error` finding), and at the depth where the recursive single-visitor scan this replaced gave
# up, so that the judge's verdict on such a file does not change. That scan spent 3 Python frames per level
# on the nodes below (whose own check then descends), 2 on any other; the walk charges the same against the
# interpreter's recursion limit.
_DEEP_NODES = (
    ast.ClassDef,
    ast.Try,
    getattr(ast, "TryStar", ast.Try),
    ast.Global,
    ast.Nonlocal,
    ast.Return,
    ast.If,
    ast.While,
    ast.IfExp,
    ast.Assign,
    ast.AnnAssign,
    ast.AugAssign,
    ast.Delete,
    ast.BinOp,
    ast.Compare,
    ast.Dict,
    ast.MatchValue,
    ast.Attribute,
    ast.Call,
)
_LEAF_FRAMES = 1  # the check at the deepest leaf (set so that both scans give up at the same depth)


def _frames(node: ast.AST) -> int:
    """The frames one level of nesting through `node` costs (see above)."""
    return 3 if isinstance(node, _DEEP_NODES) else 2


def _children(ctx: ScanContext, node: ast.AST, scope: Scope) -> list[tuple[ast.AST, Scope]]:
    """A node's children in the order the scan looks at them, each with its scope. A function's
    decorators, arguments and return annotation belong to the scope around it; its body to its own."""
    if not isinstance(node, _FUNCTIONS):
        return [(c, scope) for c in ast.iter_child_nodes(node) if not isinstance(c, _SHARED)]
    outer = [*node.decorator_list, node.args] + ([node.returns] if node.returns is not None else [])
    is_run = not scope and ctx.top_functions.get("run") is node
    inner = Scope((*scope, FunctionFacts(node, jit=id(node) in ctx.jit_defs, is_run=is_run)))
    return [(c, scope) for c in outer] + [(s, inner) for s in node.body]


def _walk(ctx: ScanContext) -> None:
    """Record every node in depth-first order with its scope. Raises RecursionError where the candidate
    nests deeper than the interpreter's recursion limit allows a scan to follow."""
    budget = sys.getrecursionlimit() - _stack_depth() - _LEAF_FRAMES
    todo: list[tuple[ast.AST, Scope, int]] = [(ctx.tree, Scope(), 0)]
    while todo:
        node, scope, depth = todo.pop()
        depth += _frames(node)
        if depth > budget:
            raise RecursionError("the candidate nests too deeply to scan")
        ctx.order[id(node)] = len(ctx.nodes)
        ctx.nodes.append(node)
        ctx.scopes[id(node)] = scope
        ctx.by_type.setdefault(type(node), []).append(node)
        todo += [(child, inner, depth) for child, inner in reversed(_children(ctx, node, scope))]


def _stack_depth() -> int:
    """Frames on the stack below the caller: what the recursion limit has already spent."""
    frame, depth = sys._getframe(1), 0
    while frame is not None:
        frame, depth = frame.f_back, depth + 1
    return depth
