"""Precision variants of the honest Triton MLA candidate: faithful ones, which the gate must pass, and cuts,
which it must reject.

The rule the tolerances enforce: accumulators, the softmax's running statistics (max and sum) and the
partial results carried between token blocks or between splits are float32; the operands of a matrix
product (the query, the cache tile, and P for P @ V) may be bf16, as in every production flash kernel.

Each variant is a set of exact line edits of `candidates/triton_mla_h16.py` (every old line must occur exactly
once): the template's default point until 2026-12-01 (16 heads per program, 32-token tiles), on which the tolerance
rows were derived and the long peaked case sized (24 blocks of 32 tokens). The committed candidate since then
(`triton_mla.py`, 64-token tiles) walks 12 blocks there, too few for its own bf16 running sum to show
(tasks/mla_attention/README.md, "What the tolerance admits"). Used as:

    path = write_variant("acc_bf16", tmp_dir / "mla_acc_bf16.py")   # a candidate file for the judge
    module = load_variant("acc_bf16", tmp_dir)                      # or imported, same run(...) ABI

FAITHFUL variants differ from the honest candidate only where the rule allows (an operand's precision, the
split or block schedule): their errors are what the tolerance table is derived from
(`tasks/mla_attention/derive_tolerances.py`). CUTS keep a declared-float32 quantity in bf16, or skip work
whose contribution is small; `kind` says which (`precision`: the issue's first kind; `skip`: work skipped).
The CPU gate rejects every cut (tests/adversarial/test_mla_precision.py). A bf16 accumulator or running sum costs
about one bf16 rounding per token block (and loses the blocks under half a bf16 unit of the running sum): over
the long peaked case's 24 blocks a split that is 1.6-2.1 x the faithful error there, far under the general
row (set by short peaked rows and small fresh cases), so that frozen case has its own row, derived from the
faithful error on it (derive_tolerances.py CASE_ROWS). A bf16 copy of a split's normalized partial costs
one bf16 rounding before a weighted average: on the contract's ordinary inputs the size of the bf16 rounding
every faithful kernel's o_latent gets, so no tolerance tells it there; the frozen case `cancelling_halves`
(flat attention over a cache whose halves cancel) makes each split's partial about L/2 times the output, where
that rounding shows (0.070 against the faithful 0.0023 at L=512). tasks/mla_attention/README.md says what the tolerance admits.
"""
from __future__ import annotations

import sys
from pathlib import Path

from tasks.variants import JudgedCase, Variant, VariantFiles, failing_stages, frozen_cases  # noqa: F401 - re-exported

_ACC_LINE = "        acc = acc * rescale[:, None] + tl.dot(p_operand, kv_latent)"
_SUM_LINE = "        running_sum = running_sum * rescale + tl.sum(p, axis=1)"
_MAX_LINE = "        new_max = tl.maximum(running_max, tl.max(logits, axis=1))"
_P_OPERAND_LINE = "        p_operand = _dot_operand(_round_to(p, kv_dtype, INTERPRETED), INTERPRETED)"
_PARTIAL_STORE_LINE = "    tl.store(part_rows + latent_offs[None, :], partial, mask=h_mask[:, None])"
_LSE_STORE_LINE = "    tl.store(lse_ptr + b * stride_lse_b + h * stride_lse_h + split, lse, mask=h_mask)"
_SPLITS_LINE = "    splits = max(1, min(splits, triton.cdiv(capacity, min_tokens_per_split), 64))"


def _bf16(expr: str) -> str:
    """`expr` rounded to bf16 (round to nearest even, as on the GPU) and read back as float32: a quantity
    kept in bf16 between uses."""
    return f"_round_to({expr}, tl.bfloat16, INTERPRETED).to(tl.float32)"


FAITHFUL: dict[str, Variant] = {
    # P kept in float32 as the P @ V operand (the honest candidate rounds P to bf16, which the rule allows)
    "p_fp32": Variant(
        ((_P_OPERAND_LINE, "        p_operand = _dot_operand(p, INTERPRETED)"),),
        "faithful", "P @ V with P in float32 (the honest candidate's P operand is bf16)",
    ),
    # one split per request: every token block goes through one float32 accumulator (another summation order)
    "one_split": Variant(
        ((_SPLITS_LINE, "    splits = 1"),),
        "faithful", "one split per request (one float32 accumulator over every token block)",
    ),
}

CUTS: dict[str, Variant] = {
    # the output accumulator kept in bf16 between token blocks
    "acc_bf16": Variant(
        ((_ACC_LINE, f"        acc = {_bf16('acc * rescale[:, None] + tl.dot(p_operand, kv_latent)')}"),),
        "precision", "output accumulator (acc) kept in bf16 between token blocks",
    ),
    # the softmax's running sum kept in bf16 between token blocks
    "sum_bf16": Variant(
        ((_SUM_LINE, f"        running_sum = {_bf16('running_sum * rescale + tl.sum(p, axis=1)')}"),),
        "precision", "softmax running sum kept in bf16 between token blocks",
    ),
    # both running statistics (max and sum) kept in bf16; the max is used consistently (a shift), so the
    # sum's rounding is what shows
    "stats_bf16": Variant(
        (
            (_MAX_LINE, f"        new_max = {_bf16('tl.maximum(running_max, tl.max(logits, axis=1))')}"),
            (_SUM_LINE, f"        running_sum = {_bf16('running_sum * rescale + tl.sum(p, axis=1)')}"),
        ),
        "precision", "softmax running max and sum kept in bf16 between token blocks",
    ),
    # accumulator and running sum in bf16: a whole flash loop in bf16 but for the logits
    "loop_bf16": Variant(
        (
            (_SUM_LINE, f"        running_sum = {_bf16('running_sum * rescale + tl.sum(p, axis=1)')}"),
            (_ACC_LINE, f"        acc = {_bf16('acc * rescale[:, None] + tl.dot(p_operand, kv_latent)')}"),
        ),
        "precision", "accumulator and running sum kept in bf16 between token blocks",
    ),
    # each split's log-sum-exp carried to the merge in bf16
    "lse_bf16": Variant(
        ((_LSE_STORE_LINE, f"    tl.store(lse_ptr + b * stride_lse_b + h * stride_lse_h + split, {_bf16('lse')}, "
                           "mask=h_mask)"),),
        "precision", "each split's log-sum-exp carried to the merge in bf16",
    ),
    # each split's normalized partial output carried to the merge in bf16: one rounding, then a weighted
    # average of such roundings; as large as o_latent's own rounding on ordinary inputs, shown by the frozen
    # case whose cache halves cancel (each partial then about L/2 times the output)
    "partial_bf16": Variant(
        ((_PARTIAL_STORE_LINE, f"    tl.store(part_rows + latent_offs[None, :], {_bf16('partial')}, "
                               "mask=h_mask[:, None])"),),
        "precision", "each split's normalized partial output carried to the merge in bf16",
    ),
    # token blocks whose largest logit is 8 (base 2) below the running max are skipped: each of their tokens
    # weighs under 1/256 of the running peak's
    "skip_small_blocks": Variant(
        (
            (_MAX_LINE, "        new_max = tl.maximum(running_max, tl.max(logits, axis=1))\n"
                        "        logits = tl.where(tl.max(logits, axis=1)[:, None] < running_max[:, None] - 8.0, "
                        "float(\"-inf\"), logits)"),
        ),
        "skip", "token blocks whose best token weighs under 2^-8 of the running peak's are skipped",
    ),
}

VARIANTS: dict[str, Variant] = {**FAITHFUL, **CUTS}


# The kernel the variants edit (module docstring); tests/tasks/mla_attention/test_templates.py keeps it the template's
# rendering of that point (space.yaml starts[0]).
VARIANT_BASE_PATH = Path(__file__).resolve().parent / "candidates" / "triton_mla_h16.py"
_FILES = VariantFiles(lambda name: list(VARIANTS[name].edits), "_mla_precision", VARIANT_BASE_PATH)
variant_source, write_variant, load_variant = _FILES.source, _FILES.write, _FILES.load


if __name__ == "__main__":
    # python -m tasks.mla_attention.precision_variants NAME OUT.py: write one variant as a candidate file.
    if len(sys.argv) != 3 or sys.argv[1] not in VARIANTS:
        sys.exit(f"usage: python -m tasks.mla_attention.precision_variants {{{','.join(VARIANTS)}}} OUT.py")
    print(write_variant(sys.argv[1], sys.argv[2]))
