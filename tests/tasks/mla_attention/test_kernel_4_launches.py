"""Kernel 4 of the MLA template under the interpreter, at both values of launch_overlap (space.yaml): serial, and pdl
(the merge and the un-absorption launched as programmatic dependents, the un-absorption's whole W_UV slice loaded before
its wait, one dot over the 512 latent columns). Each gives the float64 merge of the filled splits rounded once to bf16
as o_latent, bitwise alike, and o_heads within one bf16 rounding of that o_latent times W_UV in float64; nothing of a
split slot past a row's last filled one (NaN here) reaches either. Both merges run: the row merge where a program gets
one (request, head) row (two rows under the interpreter), the block merge elsewhere. On a Hopper GPU the pdl point's whole step is
checked in tests/gpu/test_wgmma_attention_gpu.py, with the grid-dependency instructions on."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ferret.roles.offline import TemplateSearchOptimizer
from tasks.variants import import_file

REPO = Path(__file__).resolve().parents[3]
TEMPLATES = REPO / "tasks" / "mla_attention" / "templates"
SPLITS, RANK, V_DIM, NOPE = 12, 512, 128, 128
SPLITS_POW2 = 16
# one bf16 rounding (8 significant bits) of each output: relative L2 at most 2^-8
BF16_REL_L2 = 2.0**-8
POINTS = {
    "serial": {},
    "pdl": {"launch_overlap": "pdl"},
}


@pytest.fixture(scope="module")
def modules(tmp_path_factory) -> dict:
    """The default point (Triton's kernel 3) rendered at each POINTS entry, loaded from a real file (Triton's JIT reads
    its kernels' source there)."""
    optimizer = TemplateSearchOptimizer(TEMPLATES)
    space = optimizer.space
    folder = tmp_path_factory.mktemp("kernel4")
    loaded = {}
    for name, changes in POINTS.items():
        path = folder / f"kernel4_{name}.py"
        path.write_text(optimizer.render(space.canonical({**space.default, **changes})))
        loaded[name] = import_file(path, f"kernel4_{name}")
    return loaded


def _splits(batch: int, heads: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """partial [B, H, SPLITS, RANK] and lse [B, H, SPLITS] as kernel 3 leaves them: each row's filled splits a prefix
    (1 to SPLITS), the slots after it lse -inf and a partial never written (NaN)."""
    generator = torch.Generator().manual_seed(seed)
    partial = torch.randn((batch, heads, SPLITS, RANK), generator=generator) * 10.0
    lse = torch.rand((batch, heads, SPLITS), generator=generator) * 10.0 - 5.0
    filled = torch.randint(1, SPLITS + 1, (batch, heads), generator=generator)
    for b in range(batch):
        for h in range(heads):
            lse[b, h, filled[b, h] :] = float("-inf")
            partial[b, h, filled[b, h] :] = float("nan")
    return partial, lse


def _w_kv_b(heads: int, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return (torch.randn(heads * (NOPE + V_DIM), RANK, generator=generator) * 0.05).to(torch.bfloat16)


def _float64_merge(partial: torch.Tensor, lse: torch.Tensor) -> torch.Tensor:
    lse = lse.double()
    weight = torch.exp2(lse - lse.max(dim=-1, keepdim=True).values)
    weight = weight / weight.sum(dim=-1, keepdim=True)
    return (weight[..., None] * torch.where(torch.isinf(lse)[..., None], 0.0, partial.double())).sum(dim=2)


def _un_absorbed(o_latent: torch.Tensor, w_kv_b: torch.Tensor) -> torch.Tensor:
    """o_latent [B, H, RANK] times each head's W_UV (rows h*(NOPE+V)+NOPE.. of kv_b_proj) in float64."""
    w_uv = w_kv_b.double().view(o_latent.shape[1], NOPE + V_DIM, RANK)[:, NOPE:]
    return torch.einsum("bhr,hvr->bhv", o_latent.double(), w_uv)


def _rel_l2(x: torch.Tensor, ref: torch.Tensor) -> float:
    return float((x.double() - ref).norm() / ref.norm())


def _kernel_4(module, partial, lse, w_kv_b) -> tuple[torch.Tensor, torch.Tensor]:
    o_heads = torch.full((*partial.shape[:2], V_DIM), float("nan"), dtype=torch.bfloat16)
    o_latent = module._merge_and_unabsorb(partial, lse, w_kv_b, o_heads, SPLITS_POW2, True)
    return o_latent, o_heads


@pytest.mark.parametrize(("batch", "heads", "rows_a_program"), [(1, 2, 1), (3, 3, 8)], ids=["row-merge", "block-merge"])
def test_each_point_s_kernel_4_is_the_merge_rounded_once_then_un_absorbed(modules, batch, heads, rows_a_program):
    for module in modules.values():  # which merge runs: one row a program is _merge_row_kernel's
        assert module._merge_rows(batch * heads, torch.device("cpu")) == rows_a_program
    partial, lse = _splits(batch, heads, seed=batch)
    w_kv_b = _w_kv_b(heads, seed=batch)
    expected_latent = _float64_merge(partial, lse)
    latents = {}
    for name, module in modules.items():
        o_latent, o_heads = _kernel_4(module, partial, lse, w_kv_b)
        assert torch.isfinite(o_latent).all() and torch.isfinite(o_heads).all(), name
        assert _rel_l2(o_latent, expected_latent) <= BF16_REL_L2, name
        # o_heads from the o_latent the kernel wrote (its rounding is the merge's): one more bf16 rounding
        assert _rel_l2(o_heads, _un_absorbed(o_latent, w_kv_b)) <= BF16_REL_L2, name
        latents[name] = o_latent
    assert torch.equal(latents["pdl"], latents["serial"])


def test_only_the_pdl_point_launches_programmatic_dependents_and_never_under_the_interpreter(modules):
    """launch_pdl and the grid-dependency instructions are in the pdl render only (kernel 2, both merges and the
    un-absorption); off a GPU they are switched off (the interpreter has no griddepcontrol), as the test above ran."""
    serial, pdl = (Path(modules[name].__file__).read_text() for name in ("serial", "pdl"))
    assert "launch_pdl" not in serial and "gdc_wait" not in serial
    assert pdl.count("launch_pdl=gdc") == 4 and pdl.count("tl.extra.cuda.gdc_wait()") == 3
    assert modules["pdl"]._programmatic_launches(torch.device("cpu")) is False
