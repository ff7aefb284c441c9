"""Precision variants of the honest Triton rope candidate: faithful ones, which the gate
must pass, and cuts, which it must reject.

Rope has no accumulator; its declared-float32 quantities are the YaRN inverse frequencies and the angles
position x inv_freq (float32 positions are exact up to 2**24), from which cos and sin are taken; only y is
rounded, once, to x's dtype. FAITHFUL variants change only the tiling (which tokens and heads share a
program: the same float32 math); CUTS keep inv_freq or the angles in bf16. Each variant is a set of exact
line edits of `candidates/triton_rope.py` (tasks/variants.py VariantFiles).
"""
from __future__ import annotations

from pathlib import Path

from tasks.variants import Variant, VariantFiles

CANDIDATE_PATH = Path(__file__).resolve().parent / "candidates" / "triton_rope.py"

_TILE_LINE = "MIN_TILE = 4096"
_HEADS_LINE = "MAX_BLOCK_H = 32"
_INV_FREQ_LINE = "    inv_freq = base_freq * (1.0 - ramp) + (base_freq * inv_factor) * ramp"
_ANGLE_LINE = "    angle = positions[:, None] * inv_freq[None, :]"

FAITHFUL: dict[str, Variant] = {
    # small tiles: a program per few tokens and heads (the same float32 math, another grid)
    "small_tiles": Variant(((_TILE_LINE, "MIN_TILE = 64"), (_HEADS_LINE, "MAX_BLOCK_H = 2")), "faithful",
                           "small tiles (64 elements, 2 heads a program)"),
}

CUTS: dict[str, Variant] = {
    "inv_freq_bf16": Variant(((_INV_FREQ_LINE, _INV_FREQ_LINE + "\n    inv_freq = inv_freq.to(tl.bfloat16).to(tl.float32)"),),
                             "precision", "YaRN inverse frequencies in bf16"),
    "angle_bf16": Variant(((_ANGLE_LINE, "    angle = (positions[:, None] * inv_freq[None, :]).to(tl.bfloat16).to(tl.float32)"),),
                          "precision", "angles position x inv_freq in bf16"),
}

VARIANTS: dict[str, Variant] = {**FAITHFUL, **CUTS}

_FILES = VariantFiles(lambda name: list(VARIANTS[name].edits), "_rope_precision", CANDIDATE_PATH)
variant_source, write_variant, load_variant = _FILES.source, _FILES.write, _FILES.load
