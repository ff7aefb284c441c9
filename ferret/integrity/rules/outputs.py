"""The run entry and the tensors the judge hands it: outputs must be written in place, inputs left alone.

The judge allocates NaN-filled outputs, calls run(inputs, outputs, params, trace=None) and reads back the
tensors it allocated. A candidate that rebinds or refills them, returns its answer instead, or changes
its inputs passes checks it should fail.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import cast

from ferret.integrity.astutil import str_value
from ferret.integrity.context import ScanContext
from ferret.integrity.facts import (
    attribute_store_kind,
    builtin_calls,
    method_calls,
    run_method_kind,
    setattr_kind,
    stores,
    subscript_store_kind,
)
from ferret.integrity.registry import Hit, rule
from ferret.integrity.tables import LIB


def _run_entry(ctx: ScanContext) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """run as the judge calls it, where its signature is plain enough to read (no *args, **kwargs)."""
    run = ctx.top_functions.get("run")
    if run is None or run.args.vararg is not None or run.args.kwarg is not None:
        return None
    return run


def _positional(run: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    return [a.arg for a in run.args.posonlyargs + run.args.args]


@rule("run_missing", "unwritten_output", after_walk=True)
def run_missing(ctx: ScanContext) -> Iterator[Hit]:
    """No run at all (neither defined nor bound by an assignment or import)."""
    if "run" in ctx.top_functions or "run" in ctx.aliases:
        return
    if not any(
        isinstance(n, ast.Name) and n.id == "run" and isinstance(n.ctx, ast.Store)
        for stmt in ctx.tree.body
        for n in ast.walk(stmt)
    ):
        yield Hit(ctx.tree, "the candidate defines no run(inputs, outputs, params, trace=None), so it writes no outputs")


@rule("run_signature", "unwritten_output", after_walk=True)
def run_signature(ctx: ScanContext) -> Iterator[Hit]:
    """run takes fewer than two positional arguments, so it has no outputs to write."""
    run = _run_entry(ctx)
    if run is not None and len(_positional(run)) < 2:
        yield Hit(run, "run does not take (inputs, outputs, params, trace=None): it cannot write the outputs the judge allocated")


@rule("outputs_unused", "unwritten_output", after_walk=True)
def outputs_unused(ctx: ScanContext) -> Iterator[Hit]:
    """run never mentions its outputs argument."""
    run = _run_entry(ctx)
    if run is None or len(_positional(run)) < 2:
        return
    outputs = _positional(run)[1]
    if not any(isinstance(n, ast.Name) and n.id == outputs for stmt in run.body for n in ast.walk(stmt)):
        yield Hit(run, f"run never uses its {outputs!r} argument: the judge's NaN-filled outputs are never written")


@rule("run_returns_value", "unwritten_output")
def run_returns_value(ctx: ScanContext) -> Iterator[Hit]:
    """run returns something other than None; the judge ignores it."""
    for node in ctx.nodes_of(ast.Return):
        fn = ctx.scope(node).fn
        if (
            fn is not None
            and fn.is_run
            and node.value is not None
            and not (isinstance(node.value, ast.Constant) and node.value.value is None)
        ):
            yield Hit(
                node,
                "run returns a value; the ABI ignores it: the judge reads only the outputs it "
                "allocated, which must be written in place",
            )


@rule("outputs_entry_rebound", "unwritten_output")
def outputs_entry_rebound(ctx: ScanContext) -> Iterator[Hit]:
    """outputs["y"] = ...: a new tensor in the dict, the judge's own left unwritten."""
    for store in stores(ctx):
        if subscript_store_kind(ctx, store) == "outputs_entry":
            yield Hit(
                store.target,
                f"assigns {ast.unparse(store.target)}: rebinding an entry of outputs replaces "
                "the judge's NaN-filled tensor instead of writing into it; the judge reads its own tensor",
                via=store.stmt,
            )


@rule("output_data_rebound", "unwritten_output")
def output_data_rebound(ctx: ScanContext) -> Iterator[Hit]:
    """y.data = ... on an output: the judge's tensor replaced, not written."""
    for store in stores(ctx):
        if attribute_store_kind(ctx, store) == "output_data":
            yield Hit(
                store.target,
                f"assigns {ast.unparse(store.target)}: rebinding the output's data replaces "
                "the judge's tensor instead of writing into it",
                via=store.stmt,
            )


@rule("outputs_dict_mutated", "unwritten_output")
def outputs_dict_mutated(ctx: ScanContext) -> Iterator[Hit]:
    """outputs.update(...) and kin change the dict instead of its tensors."""
    for node, method in method_calls(ctx):
        if run_method_kind(ctx, node, method) == "outputs_dict":
            yield Hit(
                node,
                f"outputs.{method.attr}(...) changes the judge's outputs dict instead of writing into its NaN-filled tensors",
            )


@rule("inputs_entry_replaced", "input_mutation")
def inputs_entry_replaced(ctx: ScanContext) -> Iterator[Hit]:
    """inputs["x"] = ...: a later check on the same objects sees something else."""
    for store in stores(ctx):
        if subscript_store_kind(ctx, store) == "inputs_entry":
            yield Hit(
                store.target,
                f"assigns {ast.unparse(store.target)}: replacing an entry of inputs changes "
                "what a later check on the same objects would see",
                via=store.stmt,
            )


@rule("input_written", "input_mutation")
def input_written(ctx: ScanContext) -> Iterator[Hit]:
    """x[...] = ... on an input tensor, from the launcher."""
    for store in stores(ctx):
        if subscript_store_kind(ctx, store) == "input_write":
            yield Hit(
                store.target,
                f"writes {ast.unparse(store.target)} from the launcher: it changes an input "
                "tensor (only inout inputs may change, and only through the candidate's kernel)",
                via=store.stmt,
            )


@rule("input_data_rebound", "input_mutation")
def input_data_rebound(ctx: ScanContext) -> Iterator[Hit]:
    """x.data = ... on an input: the tensor the judge hashes changes."""
    for store in stores(ctx):
        if attribute_store_kind(ctx, store) == "input_data":
            yield Hit(
                store.target,
                f"assigns {ast.unparse(store.target)}: rebinding an input tensor's data changes the input the judge hashes",
                via=store.stmt,
            )


@rule("inputs_dict_mutated", "input_mutation")
def inputs_dict_mutated(ctx: ScanContext) -> Iterator[Hit]:
    """inputs.update(...) and kin change the judge's inputs dict."""
    for node, method in method_calls(ctx):
        if run_method_kind(ctx, node, method) == "inputs_dict":
            yield Hit(node, f"inputs.{method.attr}(...) changes the judge's inputs dict")


@rule("input_changed_in_place", "input_mutation")
def input_changed_in_place(ctx: ScanContext) -> Iterator[Hit]:
    """x.zero_() and other in-place methods on an input tensor, from the launcher."""
    for node, method in method_calls(ctx):
        if run_method_kind(ctx, node, method) == "input_inplace":
            yield Hit(
                node,
                f".{method.attr}(...) changes an input tensor in place from the launcher (only inout "
                "inputs may change, and only through the candidate's kernel)",
            )


@rule("setattr_tensor_data", "input_mutation")
def setattr_tensor_data(ctx: ScanContext) -> Iterator[Hit]:
    """setattr(t, "data", ...): a tensor's data rebound behind the judge's back."""
    for node, name in builtin_calls(ctx, "setattr", "delattr"):
        if setattr_kind(ctx, node) == "tensor_data":
            # "tensor_data" means the second argument is the string literal "data" or "grad"
            yield Hit(node, f"{name}(..., {str_value(node.args[1])!r}, ...): rebinding a tensor's data behind the judge's back")


@rule("output_constant_write", "constant_output")
def output_constant_write(ctx: ScanContext) -> Iterator[Hit]:
    """y[...] = 0.0: a constant written into the output."""
    for store in stores(ctx):
        if subscript_store_kind(ctx, store) == "output_constant":
            value = cast(ast.AST, store.value)  # "output_constant" means a literal value was stored
            yield Hit(
                store.target,
                f"writes the constant {ast.unparse(value)} into the output: a constant "
                "output passes only where the true output is tiny",
                via=store.stmt,
            )


@rule("output_constant_fill", "constant_output")
def output_constant_fill(ctx: ScanContext) -> Iterator[Hit]:
    """y.zero_(), y.fill_(...), y.normal_() and kin on an output."""
    for node, method in method_calls(ctx):
        if run_method_kind(ctx, node, method) == "output_fill":
            yield Hit(
                node,
                f".{method.attr}(...) fills the output with a constant or random values: it passes "
                "only where the true output is tiny or input independent",
            )


@rule("output_indexing_copy", LIB)
def output_indexing_copy(ctx: ScanContext) -> Iterator[Hit]:
    """y[...] = expr: PyTorch's indexing copy writes the output, not the candidate's kernel."""
    for store in stores(ctx):
        if subscript_store_kind(ctx, store) == "output_copy":
            yield Hit(
                store.target,
                f"writes {ast.unparse(store.target)} with a PyTorch indexing copy instead of the candidate's kernel",
                via=store.stmt,
            )
