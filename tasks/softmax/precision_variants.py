"""Precision variants of the honest Triton softmax candidate: faithful ones, which the gate
must pass, and cuts, which it must reject.

The rule: the row's max and sum (running statistics, per lane in the looped kernel) are float32; only y is
rounded, once, to x's dtype. FAITHFUL variants change only the summation order (every row through the
looped kernel, 8192-wide or 256-wide blocks); CUTS keep the sum or the max in bf16. Each variant is a set of
exact line edits of `candidates/triton_softmax.py` (tasks/variants.py VariantFiles).
"""
from __future__ import annotations

from pathlib import Path

from tasks.variants import Variant, VariantFiles

CANDIDATE_PATH = Path(__file__).resolve().parent / "candidates" / "triton_softmax.py"

_FUSED_LINE = "FUSED_MAX_N = 16384"
_BLOCK_LINE = "LONG_ROW_BLOCK = 8192"
_FUSED_SUM_LINE = "    row_sum = tl.sum(shifted_exp, axis=1)"
_LOOP_SUM_LINE = "        lane_sum = lane_sum * rescale + tl.where(only_neg_inf, 0.0, tl.exp(x - new_max))"
_FUSED_MAX_LINE = "    row_max = tl.max(x, axis=1)"
_LOOP_MAX_LINE = "    row_max = tl.max(lane_max, axis=0)"
_LOOPED = ((_FUSED_LINE, "FUSED_MAX_N = 0"), (_BLOCK_LINE, "LONG_ROW_BLOCK = 256"))

FAITHFUL: dict[str, Variant] = {
    "looped": Variant(((_FUSED_LINE, "FUSED_MAX_N = 0"),), "faithful", "every row through the looped (online) kernel"),
    "looped_small_blocks": Variant(_LOOPED, "faithful", "every row through the looped kernel, 256-wide blocks"),
}

CUTS: dict[str, Variant] = {
    # the row's sum of exponentials rounded to bf16
    "sum_bf16": Variant(
        ((_FUSED_SUM_LINE, "    row_sum = tl.sum(shifted_exp, axis=1).to(tl.bfloat16).to(tl.float32)"),),
        "precision", "row sum in bf16",
    ),
    # the per-lane running sum kept in bf16 between blocks of the online softmax
    "running_sum_bf16": Variant(
        (*_LOOPED, (_LOOP_SUM_LINE, "        lane_sum = (lane_sum * rescale + tl.where(only_neg_inf, 0.0, "
                                    "tl.exp(x - new_max))).to(tl.bfloat16).to(tl.float32)")),
        "precision", "online softmax's running sum kept in bf16 between 256-wide blocks",
    ),
    # the row's max rounded to bf16 (fused and looped kernels): a consistent shift for y, a wrong statistic
    "max_bf16": Variant(
        ((_FUSED_MAX_LINE, "    row_max = tl.max(x, axis=1).to(tl.bfloat16).to(tl.float32)"),
         (_LOOP_MAX_LINE, "    row_max = tl.max(lane_max, axis=0).to(tl.bfloat16).to(tl.float32)")),
        "precision", "row max in bf16",
    ),
}

VARIANTS: dict[str, Variant] = {**FAITHFUL, **CUTS}

_FILES = VariantFiles(lambda name: list(VARIANTS[name].edits), "_softmax_precision", CANDIDATE_PATH)
variant_source, write_variant, load_variant = _FILES.source, _FILES.write, _FILES.load
