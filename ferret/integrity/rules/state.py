"""State that outlives a call, and patches to modules the judge relies on.

The judge calls run once to warm up and then several times under its timer, and it times, compares and
reports with code imported from the same interpreter. A candidate that counts its calls can tell the
warm-up from the timed runs; one that keeps its arguments can replay an earlier answer; one that writes
attributes of imported modules (or of the interpreter's module table) changes the judge's own code.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import cast

from ferret.integrity.context import ScanContext
from ferret.integrity.facts import (
    attribute_store_kind,
    builtin_calls,
    method_calls,
    run_method_kind,
    setattr_kind,
    shown_path,
    stores,
    subscript_store_kind,
)
from ferret.integrity.registry import Hit, rule
from ferret.integrity.tables import CONTAINER_MUTATORS


@rule("global_statement", "warmup_detection")
def global_statement(ctx: ScanContext) -> Iterator[Hit]:
    """`global n`: a module-level name rebound from inside a function."""
    for node in ctx.nodes_of(ast.Global):
        yield Hit(
            node,
            f"global {', '.join(node.names)}: state rebound across calls can count calls and tell the "
            "warm-up from the timed runs",
        )


@rule("nonlocal_statement", "warmup_detection")
def nonlocal_statement(ctx: ScanContext) -> Iterator[Hit]:
    """`nonlocal n`: a closure's variable rebound across calls."""
    for node in ctx.nodes_of(ast.Nonlocal):
        yield Hit(
            node,
            f"nonlocal {', '.join(node.names)}: state kept in a closure across calls can count calls "
            "and tell the warm-up from the timed runs",
        )


@rule("function_attribute", "warmup_detection")
def function_attribute(ctx: ScanContext) -> Iterator[Hit]:
    """run.calls = ...: an attribute on a module-level function."""
    for store in stores(ctx):
        if attribute_store_kind(ctx, store) == "function":
            yield Hit(
                store.target,
                f"assigns {ast.unparse(store.target)}: an attribute on a function keeps state "
                "across calls and can count them to tell the warm-up from the timed runs",
                via=store.stmt,
            )


@rule("setattr_function", "warmup_detection")
def setattr_function(ctx: ScanContext) -> Iterator[Hit]:
    """setattr(run, "calls", ...): the same, through setattr."""
    for node, name in builtin_calls(ctx, "setattr", "delattr"):
        obj = node.args[0] if node.args else None
        # "function" means the first argument is a Name of a module-level function
        if setattr_kind(ctx, node) == "function" and isinstance(obj, ast.Name):
            yield Hit(node, f"{name}({obj.id}, ...): an attribute on a function keeps state across calls and can count them")


@rule("counter_update", "warmup_detection")
def counter_update(ctx: ScanContext) -> Iterator[Hit]:
    """_count[0] += 1 on a module-level container, inside a function."""
    for store in stores(ctx):
        if subscript_store_kind(ctx, store) == "counter":
            yield Hit(
                store.target,
                f"updates {ast.unparse(store.target)}, module-level state, from its own value "
                "inside a function: a counter kept across calls can tell the warm-up from the timed runs",
                via=store.stmt,
            )


@rule("argument_kept", "cross_call_caching")
def argument_kept(ctx: ScanContext) -> Iterator[Hit]:
    """_last["y"] = y: an argument (or a view of one) kept in a module-level container."""
    for store in stores(ctx):
        base = store.target.value
        # "argument_kept" means a value was stored into a module-level container named by a Name
        if subscript_store_kind(ctx, store) == "argument_kept" and isinstance(base, ast.Name):
            value = cast(ast.AST, store.value)  # the kind is given only where a value is stored
            yield Hit(
                store.target,
                f"stores {ast.unparse(value)} (an argument or a view of it) in the "
                f"module-level {base.id}: state kept across calls can replay an earlier result",
                via=store.stmt,
            )


@rule("argument_appended", "cross_call_caching")
def argument_appended(ctx: ScanContext) -> Iterator[Hit]:
    """_seen.append(x) and kin: an argument added to a module-level container."""
    for node, method in method_calls(ctx):
        fn, receiver, m = ctx.scope(node).fn, method.value, method.attr
        if (
            fn is None
            or not (isinstance(receiver, ast.Name) and receiver.id in ctx.containers)
            or m not in CONTAINER_MUTATORS
            or run_method_kind(ctx, node, method) is not None
        ):
            continue
        values = list(node.args) + [k.value for k in node.keywords]
        if m in ("setdefault", "__setitem__", "insert"):
            values = values[1:]  # the key or index, not the value kept
        if any(ctx.holds_arguments(v, fn) for v in values):
            yield Hit(
                node,
                f"{receiver.id}.{m}(...) keeps an argument (or a view of it) in module-level state "
                "across calls: an earlier result can be replayed",
            )


@rule("module_attribute_patched", "harness_patching")
def module_attribute_patched(ctx: ScanContext) -> Iterator[Hit]:
    """torch.cuda.synchronize = ...: an attribute of an imported module replaced."""
    for store in stores(ctx):
        if isinstance(store.target, ast.Attribute) and attribute_store_kind(ctx, store) == "module":
            full = f"{ctx.resolve(store.target.value)}.{store.target.attr}"
            yield Hit(
                store.target,
                f"assigns {shown_path(store.target, full)}: patching an attribute of an imported "
                "module replaces functions the judge itself calls (timers, synchronize, comparisons)",
                via=store.stmt,
            )


@rule("interpreter_attribute_replaced", "shadowing")
def interpreter_attribute_replaced(ctx: ScanContext) -> Iterator[Hit]:
    """sys.path = ..., builtins.open = ...: the interpreter's module table, import path or builtins."""
    for store in stores(ctx):
        if isinstance(store.target, ast.Attribute) and attribute_store_kind(ctx, store) == "interpreter":
            full = f"{ctx.resolve(store.target.value)}.{store.target.attr}"
            yield Hit(
                store.target,
                f"assigns {shown_path(store.target, full)}: it replaces what the judge's code "
                "imports or finds in the interpreter",
                via=store.stmt,
            )


@rule("timer_method_patched", "harness_patching")
def timer_method_patched(ctx: ScanContext) -> Iterator[Hit]:
    """event.elapsed_time = ...: a timer's method replaced on some object."""
    for store in stores(ctx):
        if attribute_store_kind(ctx, store) == "timer":
            yield Hit(
                store.target,
                f"assigns {ast.unparse(store.target)}: replacing the timer's methods fakes the clock",
                via=store.stmt,
            )


def _module_state_writes(ctx: ScanContext, kind: str) -> Iterator[Hit]:
    for store in stores(ctx):
        if subscript_store_kind(ctx, store) == kind:
            # these kinds are given only where the base resolves through an import, so the path is a str
            shown, base_path = ast.unparse(store.target), cast(str, ctx.resolve(store.target.value))
            named = shown if shown.startswith(base_path) else f"{shown} ({base_path})"
            yield Hit(
                store.target,
                f"writes {named}: it changes state of an imported module that the judge's code relies on",
                via=store.stmt,
            )


@rule("module_state_written", "harness_patching")
def module_state_written(ctx: ScanContext) -> Iterator[Hit]:
    """torch.backends.x[...] = ...: state of an imported module written through indexing."""
    yield from _module_state_writes(ctx, "module")


@rule("interpreter_state_written", "shadowing")
def interpreter_state_written(ctx: ScanContext) -> Iterator[Hit]:
    """sys.modules["torch"] = ...: the module table (or other interpreter state) written."""
    yield from _module_state_writes(ctx, "interpreter")


@rule("setattr_module", "harness_patching")
def setattr_module(ctx: ScanContext) -> Iterator[Hit]:
    """setattr(torch, "equal", ...): an imported module patched through setattr."""
    for node, name in builtin_calls(ctx, "setattr", "delattr"):
        if setattr_kind(ctx, node) == "module":
            yield Hit(
                node,
                f"{name}({ast.unparse(node.args[0])}, ...): patching an attribute of an imported module "
                "replaces functions the judge itself calls",
            )


@rule("setattr_interpreter", "shadowing")
def setattr_interpreter(ctx: ScanContext) -> Iterator[Hit]:
    """setattr(sys, ...), setattr(builtins, ...): the interpreter patched through setattr."""
    for node, name in builtin_calls(ctx, "setattr", "delattr"):
        if setattr_kind(ctx, node) == "interpreter":
            yield Hit(
                node,
                f"{name}({ast.unparse(node.args[0])}, ...): it replaces what the judge's code imports "
                "or finds in the interpreter",
            )
