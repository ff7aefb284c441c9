"""Precision variants of the honest Triton RMSNorm candidate: faithful ones, which the gate
must pass, and cuts, which it must reject.

The rule: the sum of squares (an accumulator) and inv_rms are float32; only the output is rounded, once, to
x's dtype. FAITHFUL variants change only the summation order (every row through the looped kernel, with its
8192-wide or 256-wide blocks); CUTS keep the sum of squares in bf16. Each variant is a set of exact line
edits of `candidates/triton_rmsnorm.py` (tasks/variants.py VariantFiles):

    path = write_variant("sumsq_bf16", tmp_dir / "rmsnorm_sumsq_bf16.py")
"""
from __future__ import annotations

from pathlib import Path

from tasks.variants import Variant, VariantFiles

CANDIDATE_PATH = Path(__file__).resolve().parent / "candidates" / "triton_rmsnorm.py"

_FUSED_LINE = "FUSED_MAX_N = 16384"
_BLOCK_LINE = "LONG_ROW_BLOCK = 8192"
_FUSED_SUM_LINE = "    inv_rms = tl.rsqrt(tl.sum(x * x, axis=1) / N + eps)"
_LOOP_SUM_LINE = "        sum_sq += x * x"

FAITHFUL: dict[str, Variant] = {
    # every row through the looped kernel: per-lane float32 partial sums, then one reduction
    "looped": Variant(((_FUSED_LINE, "FUSED_MAX_N = 0"),), "faithful", "every row through the looped kernel"),
    # the same with 256-wide blocks: longer per-lane float32 sums (another summation order)
    "looped_small_blocks": Variant(
        ((_FUSED_LINE, "FUSED_MAX_N = 0"), (_BLOCK_LINE, "LONG_ROW_BLOCK = 256")),
        "faithful", "every row through the looped kernel, 256-wide blocks",
    ),
}

CUTS: dict[str, Variant] = {
    # the sum of squares rounded to bf16 (fused kernel) or kept in bf16 between blocks (looped kernel)
    "sumsq_bf16": Variant(
        (
            (_FUSED_SUM_LINE, "    inv_rms = tl.rsqrt(tl.sum(x * x, axis=1).to(tl.bfloat16).to(tl.float32) / N + eps)"),
            (_LOOP_SUM_LINE, "        sum_sq = (sum_sq + x * x).to(tl.bfloat16).to(tl.float32)"),
        ),
        "precision", "sum of squares in bf16",
    ),
    # the same cut on the looped kernel's accumulator only, every row through it
    "looped_sumsq_bf16": Variant(
        ((_FUSED_LINE, "FUSED_MAX_N = 0"), (_BLOCK_LINE, "LONG_ROW_BLOCK = 256"),
         (_LOOP_SUM_LINE, "        sum_sq = (sum_sq + x * x).to(tl.bfloat16).to(tl.float32)")),
        "precision", "per-lane sum of squares kept in bf16 between 256-wide blocks",
    ),
}

VARIANTS: dict[str, Variant] = {**FAITHFUL, **CUTS}

_FILES = VariantFiles(lambda name: list(VARIANTS[name].edits), "_rmsnorm_precision", CANDIDATE_PATH)
variant_source, write_variant, load_variant = _FILES.source, _FILES.write, _FILES.load
