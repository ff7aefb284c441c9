"""Access the scan cannot follow, and data taken to the host.

The tables name what a candidate may not reach by the paths it spells. A name built at run time (`getattr(torch,
"mat" + "mul")`), a namespace read as a dict (`vars(torch)["softmax"]`, `torch.__dict__`), an attribute getter
(`operator.attrgetter("nn.functional.softmax")`), a module imported by a computed name, or a module reached as an
attribute of another module (`triton.runtime.interpreter.np`, which is NumPy) leaves no path to check: each is
named as `dynamic_access`, where it is written. The run-time watches stand behind the scan whatever the path (the
ATen watch sees torch's compute, the host-numerics watch sees data taken out of a tensor); the finding says where
the candidate hid its path.

`host_numerics` names the tensor methods that hand a tensor's values to Python or NumPy (`.tolist()`, `.numpy()`,
`__array__`, `__dlpack__`) in the launcher; `.item()` stays allowed here (launchers read integer lengths with it):
the run-time watch tells floating-point data from integer metadata.
"""

from __future__ import annotations

import ast
import importlib
import sys
from collections.abc import Iterator
from types import ModuleType

from ferret.integrity.astutil import str_value
from ferret.integrity.context import ScanContext, shared
from ferret.integrity.facts import builtin_calls, imported, method_calls
from ferret.integrity.registry import Hit, rule
from ferret.integrity.tables import ALLOWED_TABLE, IMPORT_RULES, MENTION_RULES, lookup

_SLUG = "dynamic_access"
_ATTRIBUTE_BUILTINS = ("getattr", "setattr", "delattr")
_NAMESPACE_BUILTINS = ("vars", "globals", "locals", "dir", "eval", "exec", "compile", "__import__")
_GETTERS = ("operator.attrgetter", "operator.methodcaller", "importlib.import_module", "importlib.__import__")
# Attributes that read or reroute an object's whole namespace rather than one name of it.
_NAMESPACE_ATTRIBUTES = ("__dict__", "__getattribute__", "__getattr__", "__setattr__", "__delattr__", "__builtins__")
_HOST_METHODS = ("tolist", "numpy", "__array__", "__dlpack__")


@rule("computed_attribute_name", _SLUG)
def computed_attribute_name(ctx: ScanContext) -> Iterator[Hit]:
    """getattr/setattr/delattr(obj, name) with a name that is not a string literal: a path built at run time."""
    for node, name in builtin_calls(ctx, *_ATTRIBUTE_BUILTINS):
        if len(node.args) < 2 or str_value(node.args[1]) is None:
            shown = ast.unparse(node.args[1]) if len(node.args) >= 2 else "no literal name"
            yield Hit(
                node,
                f"{name}(..., {shown[:60]}): an attribute reached by a name built at run time, which the scan "
                "cannot check against what a candidate may use",
            )


@rule("attribute_builtin_handed_on", _SLUG)
def attribute_builtin_handed_on(ctx: ScanContext) -> Iterator[Hit]:
    """getattr, setattr or delattr used other than called (reduce(getattr, ...), g = getattr): attribute access
    by names the scan never sees."""
    called = {id(node.func) for node in ctx.nodes_of(ast.Call)}
    for node in ctx.nodes_of(ast.Name):
        if node.id in _ATTRIBUTE_BUILTINS and node.id not in ctx.aliases and id(node) not in called:
            if isinstance(node.ctx, ast.Load):
                yield Hit(node, f"{node.id} handed on as a value: attribute access by names the scan never sees")


@rule("namespace_builtin", _SLUG)
def namespace_builtin(ctx: ScanContext) -> Iterator[Hit]:
    """vars(), globals(), locals(), dir(), eval/exec/compile, __import__: a namespace read as data or code run from
    a string."""
    for node, name in builtin_calls(ctx, *_NAMESPACE_BUILTINS):
        yield Hit(node, f"{name}(...): names looked up in a namespace or code built at run time, which the scan cannot follow")


@rule("attribute_getter", _SLUG)
def attribute_getter(ctx: ScanContext) -> Iterator[Hit]:
    """operator.attrgetter / methodcaller, importlib.import_module: a path given as a string to be followed later."""
    for node in ctx.nodes_of(ast.Name, ast.Attribute):
        path = ctx.aliases.get(node.id) if isinstance(node, ast.Name) else ctx.resolve(node)
        if path in _GETTERS and (isinstance(node, ast.Attribute) or isinstance(node.ctx, ast.Load)):
            yield Hit(node, f"{ast.unparse(node)} ({path}) follows a path given as a string, which the scan cannot check")


@rule("namespace_attribute", _SLUG)
def namespace_attribute(ctx: ScanContext) -> Iterator[Hit]:
    """.__dict__, .__getattribute__, .__getattr__, .__builtins__ (and the bare name): an object's namespace read
    or its lookup rerouted."""
    for node in ctx.nodes_of(ast.Attribute, ast.Name):
        name = node.attr if isinstance(node, ast.Attribute) else node.id
        if name in _NAMESPACE_ATTRIBUTES:
            yield Hit(node, f"{name}: a namespace read as a dict or its attribute lookup called by hand, past the scan's paths")


@rule("reexported_module", _SLUG)
def reexported_module(ctx: ScanContext) -> Iterator[Hit]:
    """A module reached as an attribute of another module (`triton.runtime.interpreter.np` is NumPy): what the
    candidate calls is not what its path says."""
    for node, (via, real) in _module_hops(ctx):
        shown = ast.unparse(node).splitlines()[0]
        yield Hit(
            node,
            f"{shown[:60]} reaches the module {real} as {via}: a module re-exported by another is "
            "a path the scan's tables do not name",
        )


@rule("host_extraction_method", "host_numerics")
def host_extraction_method(ctx: ScanContext) -> Iterator[Hit]:
    """.tolist(), .numpy(), .__array__(), .__dlpack__() in the launcher: a tensor's values handed to Python or NumPy,
    where the math can be done on the host instead of in the kernel."""
    for node, method in method_calls(ctx):
        if method.attr in _HOST_METHODS and not ctx.scope(node).in_jit:
            yield Hit(
                node, f".{method.attr}() hands a tensor's values to the host, where Python or NumPy can do the kernel's math"
            )


# ----------------------------------------------------------------------------------------- re-exports
def _load_allowed(ctx: ScanContext) -> None:
    """Import the allowed modules the candidate imports (never anything else; a name imported from a module is tried
    as a submodule), so that the modules its paths go through can be looked up; what fails to import is left alone
    (the run-time watches stand behind it)."""
    for item in imported(ctx):
        allowed = lookup(ALLOWED_TABLE, item.path)
        banned = lookup(IMPORT_RULES, item.path) or lookup(MENTION_RULES, item.path)
        if allowed and (banned is None or len(allowed[0]) > len(banned[0])) and item.path not in sys.modules:
            try:
                importlib.import_module(item.path)
            except Exception:  # noqa: BLE001 - an allowed module that does not import here is the candidate's problem
                continue


def _hop(path: str) -> tuple[str, str] | None:
    """(the path's prefix that names a module, that module's own name) where a module is reached under another
    module's name, looked up in the loaded modules' namespaces (nothing is imported or called here)."""
    parts = path.split(".")
    for i in range(1, len(parts)):
        owner = sys.modules.get(".".join(parts[:i]))
        if owner is None:
            continue
        value = vars(owner).get(parts[i])
        reached = ".".join(parts[: i + 1])
        if isinstance(value, ModuleType) and value.__name__ != reached:
            return reached, value.__name__
    return None


@shared
def _module_hops(ctx: ScanContext) -> list[tuple[ast.AST, tuple[str, str]]]:
    """(node, (reached as, real module)) for each import of a name below a re-exported module, and the outermost
    attribute chain that goes through one."""
    _load_allowed(ctx)
    found: list[tuple[ast.AST, tuple[str, str]]] = []
    for item in imported(ctx):
        hop = _hop(item.path) if lookup(ALLOWED_TABLE, item.path) else None
        if hop is not None:
            found.append((item.node, hop))
    inner: set[int] = set()
    for node in ctx.nodes_of(ast.Attribute):
        if id(node) in inner:
            continue
        path = ctx.resolve(node)
        hop = _hop(path) if path is not None and lookup(ALLOWED_TABLE, path) else None
        if hop is not None:
            found.append((node, hop))
            inner.update(id(n) for n in ast.walk(node))
    return found
