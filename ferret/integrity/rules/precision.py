"""Lower precision: computing or keeping intermediates below what the contract asks.

A literal low dtype in the launcher or the kernel (a cast, an allocation, a dot's output type), TF32 or
reduced-precision flags, and autocast trade accuracy for speed the contract did not allow. Casting the
final result to the output's own dtype is written with a non-literal dtype and passes.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ferret.integrity.astutil import const_value
from ferret.integrity.context import ScanContext
from ferret.integrity.facts import (
    attribute_store_kind,
    is_bitcast,
    is_low_dtype,
    method_calls,
    resolved_calls,
    stores,
)
from ferret.integrity.registry import Hit, rule
from ferret.integrity.tables import ATTR_RULES

_TF32_PRECISIONS = ("tf32", "tf32x3", "bf16x3", "bf16x6")


def _downcast(node: ast.AST, what: str, via: ast.AST | None = None) -> Hit:
    return Hit(
        node,
        f"downcast {what}: check the contract's accumulation precision; a literal lower-precision "
        "dtype computes or stores intermediates below what the contract asks (casting the final result to "
        "the output's own dtype is done with a non-literal dtype)",
        via=via,
    )


@rule("precision_flag_set", "lower_precision")
def precision_flag_set(ctx: ScanContext) -> Iterator[Hit]:
    """torch.backends.cuda.matmul.allow_tf32 = True and the other reduced-precision switches."""
    for store in stores(ctx):
        # attribute_store_kind gives a kind only for an Attribute target; the isinstance lets the checker know
        if isinstance(store.target, ast.Attribute) and attribute_store_kind(ctx, store) == "precision_flag":
            yield Hit(store.target, f"sets {ast.unparse(store.target)}: {ATTR_RULES[store.target.attr][1]}", via=store.stmt)


@rule("triton_cast", "lower_precision")
def triton_cast(ctx: ScanContext) -> Iterator[Hit]:
    """tl.cast(x, tl.float16) (a bitcast reinterprets bits and passes)."""
    for node, path in resolved_calls(ctx):
        if path not in ("triton.language.cast", "triton.language.core.cast"):
            continue
        dtype = node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "dtype"), None)
        if dtype is not None and not is_bitcast(node) and is_low_dtype(ctx, dtype):
            yield _downcast(node, ast.unparse(dtype))


@rule("method_cast", "lower_precision")
def method_cast(ctx: ScanContext) -> Iterator[Hit]:
    """x.half(), x.bfloat16(), x.to(torch.float16), v.to(tl.bfloat16) (in the launcher or the kernel)."""
    for node, method in method_calls(ctx):
        m = method.attr
        if m in ("half", "bfloat16") and not node.args:
            yield _downcast(node, f".{m}()")
        elif m in ("to", "type") and not is_bitcast(node):
            dtypes = list(node.args) + [k.value for k in node.keywords if k.arg == "dtype"]
            low = next((arg for arg in dtypes if is_low_dtype(ctx, arg)), None)
            if low is not None:
                yield _downcast(node, f".{m}({ast.unparse(low)})")


def _keyword_downcast(ctx: ScanContext, node: ast.Call, k: ast.keyword) -> str | None:
    """What a keyword asks for, where it asks for lower precision: dtype=<low>, input_precision="tf32",
    allow_tf32=True. A dtype keyword of .to()/.type() is the cast itself, reported as such."""
    if k.arg in ("dtype", "out_dtype") and is_low_dtype(ctx, k.value):
        is_cast = isinstance(node.func, ast.Attribute) and node.func.attr in ("to", "type")
        return None if is_cast else f"{k.arg}={ast.unparse(k.value)}"
    if k.arg == "input_precision" and isinstance(k.value, ast.Constant) and str(k.value.value).lower() in _TF32_PRECISIONS:
        return f"input_precision={k.value.value!r}"
    if k.arg == "allow_tf32" and const_value(k.value) is True:
        return "allow_tf32=True"
    return None


@rule("precision_keyword", "lower_precision")
def precision_keyword(ctx: ScanContext) -> Iterator[Hit]:
    """A keyword asking any call for lower precision: dtype=torch.float16, out_dtype=tl.bfloat16,
    input_precision="tf32", allow_tf32=True."""
    for node in ctx.nodes_of(ast.Call):
        for k in node.keywords:
            what = _keyword_downcast(ctx, node, k)
            if what is not None:
                yield _downcast(node, what)
