"""Tensors that are not what they seem: subclasses and hooks that compute when read (lazy results), and
raw storage that can still hold an earlier answer (allocator reuse)."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ferret.integrity.context import ScanContext
from ferret.integrity.facts import (
    attribute_store_kind,
    builtin_calls,
    method_calls,
    setattr_kind,
    stores,
)
from ferret.integrity.registry import Hit, rule

_HOOKS = ("__torch_function__", "__torch_dispatch__")


@rule("torch_hook_defined", "lazy_result")
def torch_hook_defined(ctx: ScanContext) -> Iterator[Hit]:
    """def __torch_function__ / __torch_dispatch__: a hook that intercepts every op on a tensor."""
    for node in ctx.nodes_of(ast.FunctionDef, ast.AsyncFunctionDef):
        if node.name in _HOOKS:
            yield Hit(
                node, f"defines {node.name}, a hook that makes a tensor compute when it is read instead of when the kernel runs"
            )


@rule("tensor_subclass", "lazy_result")
def tensor_subclass(ctx: ScanContext) -> Iterator[Hit]:
    """class X(torch.Tensor): a subclass can defer or fake the computation."""
    for node in ctx.nodes_of(ast.ClassDef):
        for base in node.bases:
            path = ctx.resolve(base) or ""
            last = base.attr if isinstance(base, ast.Attribute) else base.id if isinstance(base, ast.Name) else ""
            if path.endswith(".Tensor") or last == "Tensor":
                yield Hit(
                    node,
                    f"class {node.name} subclasses {ast.unparse(base)}: a tensor subclass can defer or "
                    "fake the computation until its values are read",
                )


@rule("class_swapped", "lazy_result")
def class_swapped(ctx: ScanContext) -> Iterator[Hit]:
    """t.__class__ = ...: an existing tensor turned into a subclass."""
    for store in stores(ctx):
        if attribute_store_kind(ctx, store) == "class_swap":
            yield Hit(
                store.target,
                f"assigns {ast.unparse(store.target)}: swapping a tensor's class makes it a subclass that can compute when read",
                via=store.stmt,
            )


@rule("setattr_class", "lazy_result")
def setattr_class(ctx: ScanContext) -> Iterator[Hit]:
    """setattr(t, "__class__", ...): the same, through setattr."""
    for node, name in builtin_calls(ctx, "setattr", "delattr"):
        if setattr_kind(ctx, node) == "class":
            yield Hit(
                node, f"{name}(..., '__class__', ...): swapping a tensor's class makes it a subclass that can compute when read"
            )


@rule("dynamic_class", "lazy_result")
def dynamic_class(ctx: ScanContext) -> Iterator[Hit]:
    """type(name, bases, namespace): a class built at run time, out of the scan's sight."""
    for node, _ in builtin_calls(ctx, "type"):
        if len(node.args) == 3:
            yield Hit(
                node, "type(name, bases, namespace) builds a class at run time, e.g. a tensor subclass that computes when read"
            )


@rule("legacy_storage", "allocator_reuse")
def legacy_storage(ctx: ScanContext) -> Iterator[Hit]:
    """t.storage(): a tensor's raw storage."""
    for node, method in method_calls(ctx):
        if method.attr == "storage" and not node.args:
            yield Hit(
                node, ".storage() reaches a tensor's raw storage, which can alias memory that still holds an earlier answer"
            )


@rule("storage_swapped", "allocator_reuse")
def storage_swapped(ctx: ScanContext) -> Iterator[Hit]:
    """t.set_(...): a tensor pointed at other memory."""
    for node, method in method_calls(ctx):
        if method.attr == "set_":
            yield Hit(node, ".set_(...) swaps a tensor's storage, which can alias memory that still holds an earlier answer")
