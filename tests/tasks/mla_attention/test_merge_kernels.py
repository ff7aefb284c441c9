"""The honest candidate's two split merges (kernel 4's first launch) under the interpreter: _merge_row_kernel (one
(request, head) row a program, where there are few rows) and _merge_splits_kernel (rows in blocks) each give the
float64 merge of the filled splits, rounded once to bf16, and nothing from a slot past a row's last filled split
(kernel 3 never writes one: NaN here) reaches the output."""
# Triton annotates a launch's constexpr arguments as `constexpr`, which a plain int is not to a type checker.
# pyright: reportArgumentType=false

from __future__ import annotations

import math

import pytest
import torch

from tasks.mla_attention.candidates import triton_mla

BATCH, HEADS, SPLITS, RANK = 2, 3, 12, triton_mla.KV_LORA_RANK
# Filled split slots of each (request, head) row: one split, a chunk and a part, all twelve, ...
FILLED = [1, 5, 12, 9, 3, 8]
SPLITS_POW2 = 16
# One bf16 rounding of the merged row (8 significant bits): relative L2 at most 2^-8 after it
BF16_REL_L2 = 2.0**-8


def _splits(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """partial [B, H, SPLITS, RANK] and lse [B, H, SPLITS] (base 2) as kernel 3 leaves them: slots past a row's filled
    prefix hold lse -inf and a partial never written (NaN here, so that reading one shows)."""
    generator = torch.Generator().manual_seed(seed)
    partial = torch.randn((BATCH, HEADS, SPLITS, RANK), generator=generator) * 10.0
    lse = torch.rand((BATCH, HEADS, SPLITS), generator=generator) * 10.0 - 5.0
    for row, filled in enumerate(FILLED):
        b, h = divmod(row, HEADS)
        lse[b, h, filled:] = float("-inf")
        partial[b, h, filled:] = float("nan")
    return partial, lse


def _expected(partial: torch.Tensor, lse: torch.Tensor) -> torch.Tensor:
    """The merge in float64: each filled split weighted by exp2(lse_s) over the row's sum of them."""
    out = torch.empty((BATCH, HEADS, RANK), dtype=torch.float64)
    for row, filled in enumerate(FILLED):
        b, h = divmod(row, HEADS)
        weights = torch.exp2(lse[b, h, :filled].double() - lse[b, h, :filled].double().max())
        out[b, h] = (weights[:, None] * partial[b, h, :filled].double()).sum(0) / weights.sum()
    return out


def _merged_by(kernel: str, partial: torch.Tensor, lse: torch.Tensor) -> torch.Tensor:
    latent = torch.empty((BATCH, HEADS, RANK), dtype=torch.bfloat16)
    strides = (partial.stride(0), partial.stride(1), partial.stride(2), lse.stride(0), lse.stride(1))
    # Triton types a launch as a call of the kernel function, where a plain int "is not a tl.constexpr".
    if kernel == "row":
        triton_mla._merge_row_kernel[(BATCH * HEADS,)](
            partial,
            lse,
            latent,
            HEADS,
            SPLITS,
            *strides,
            RANK=RANK,
            SPLIT_CHUNK=triton_mla.ROW_MERGE_SPLITS,
            SPLITS_POW2=SPLITS_POW2,  # pyright: ignore[reportArgumentType]
            INTERPRETED=True,  # pyright: ignore[reportArgumentType]
        )
    else:
        block_rows = 4  # two programs, the second one half padding
        triton_mla._merge_splits_kernel[(math.ceil(BATCH * HEADS / block_rows),)](
            partial,
            lse,
            latent,
            BATCH * HEADS,
            HEADS,
            SPLITS,
            *strides,
            RANK=RANK,
            BLOCK_ROWS=block_rows,  # pyright: ignore[reportArgumentType]
            SPLIT_CHUNK=triton_mla.MERGE_PARTIALS // block_rows,  # pyright: ignore[reportArgumentType]
            SPLITS_POW2=SPLITS_POW2,
            INTERPRETED=True,  # pyright: ignore[reportArgumentType]
        )
    return latent


@pytest.mark.parametrize("kernel", ["row", "blocks"])
def test_each_merge_is_the_float64_merge_rounded_once(kernel):
    partial, lse = _splits()
    merged = _merged_by(kernel, partial, lse).double()
    expected = _expected(partial, lse)
    assert torch.isfinite(merged).all(), "a slot past a row's filled splits (its partial NaN) reached the output"
    rel_l2 = ((merged - expected).norm(dim=-1) / expected.norm(dim=-1)).max().item()
    assert rel_l2 <= BF16_REL_L2, (kernel, rel_l2)


def _merged_by_run_path(partial: torch.Tensor, lse: torch.Tensor) -> tuple[list[str], torch.Tensor]:
    """The merge kernels `_merge_and_unabsorb` (run()'s kernel 4) launches on these splits, and its o_latent."""
    batch, heads = partial.shape[:2]
    w_kv_b = torch.zeros((heads * (triton_mla.QK_NOPE_HEAD_DIM + triton_mla.V_HEAD_DIM), RANK), dtype=torch.bfloat16)
    o_heads = torch.empty((batch, heads, triton_mla.V_HEAD_DIM), dtype=torch.bfloat16)
    launched: list[str] = []
    original = {name: getattr(triton_mla, name) for name in ("_merge_row_kernel", "_merge_splits_kernel")}

    class Recording:
        def __init__(self, name):
            self.name = name

        def __getitem__(self, grid):
            launched.append(self.name)
            return original[self.name][grid]

    with pytest.MonkeyPatch.context() as patch:
        for name in original:
            patch.setattr(triton_mla, name, Recording(name))
        o_latent = triton_mla._merge_and_unabsorb(partial, lse, w_kv_b, o_heads, SPLITS_POW2, interpreted=True)
    return launched, o_latent


def test_the_row_merge_takes_the_rows_when_a_program_would_get_one():
    """_merge_and_unabsorb launches _merge_row_kernel where _merge_rows gives one row a program (on the interpreter,
    at two rows: the contract's cancelling_halves CPU case) and _merge_splits_kernel where it gives rows in blocks;
    either way o_latent is the float64 merge rounded once."""
    cpu = torch.device("cpu")
    assert triton_mla._merge_rows(2, cpu) == 1
    assert triton_mla._merge_rows(BATCH * HEADS, cpu) > 1
    partial, lse = _splits()
    expected = _expected(partial, lse)
    for rows, kernel in (((1, 2), "_merge_row_kernel"), ((BATCH, HEADS), "_merge_splits_kernel")):
        batch, heads = rows  # the first batch x heads rows of FILLED's layout
        launched, o_latent = _merged_by_run_path(partial[:batch, :heads], lse[:batch, :heads])
        assert launched == [kernel], rows
        want = expected[:batch, :heads]
        rel_l2 = ((o_latent.double() - want).norm(dim=-1) / want.norm(dim=-1)).max().item()
        assert rel_l2 <= BF16_REL_L2, (rows, rel_l2)
