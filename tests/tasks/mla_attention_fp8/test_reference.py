"""The FP8 MLA reference: the contract's quantization of the appended row, and the bf16 contract's attention over
the dequantized cache (tasks/mla_attention/reference.py, itself validated against transformers' DeepseekV3Attention).
"""

from __future__ import annotations

from pathlib import Path

import torch

from ferret.contract.task import Task
from ferret.gate.inputs import draw_inputs
from tasks.mla_attention import reference as bf16
from tasks.mla_attention_fp8 import quant, reference

CONTRACT = Path(__file__).resolve().parents[3] / "contracts" / "mla_attention_fp8.yaml"

TOLERANCE = 1e-9  # the contract's validation.tolerance: the same float64 functions, in another order at most


def _case(name: str):
    contract = Task.load(CONTRACT).contract
    case = next(c for c in contract.cases.cpu if c.name == name)
    inputs = draw_inputs(contract, case, "bfloat16")
    return contract, inputs, reference.reference(inputs, dict(contract.params))


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    finite = torch.isfinite(b)
    return torch.equal(torch.isfinite(a), finite) and float((a[finite] - b[finite]).abs().max()) <= TOLERANCE * float(
        b[finite].abs().max()
    )


def test_attention_is_the_bf16_references_over_the_dequantized_cache():
    contract, inputs, stages = _case("typical")
    params = dict(contract.params)
    cache = torch.cat((quant.dequantize(stages["kv_latent"], stages["kv_scale"]), stages["kv_rope"]), dim=-1)
    w_uk, w_uv = bf16.split_kv_b(inputs["w_kv_b"], params)
    q_absorbed = bf16.absorb_query(inputs["q_nope"], w_uk)
    scores = bf16.attention_scores(q_absorbed, stages["q_pe_roped"], cache, inputs["cache_lens"], bf16.softmax_scale(params), 512)
    assert _close(stages["scores"], scores)
    o_latent = bf16.latent_output(bf16.attention_probs(scores), cache, inputs["cache_lens"], 512)
    assert _close(stages["o_latent"], o_latent) and _close(stages["o_heads"], bf16.unabsorb(o_latent, w_uv))


def test_the_unquantized_step_is_the_bf16_reference_on_the_same_past_rows():
    """o_heads_unquantized: the bf16 contract's reference over the dequantized past rows, its own row unquantized."""
    contract, inputs, stages = _case("ragged_batch")
    cache = torch.cat((quant.dequantize(inputs["kv_latent"], inputs["kv_scale"]), inputs["kv_rope"].double()), dim=-1)
    bf16_inputs = {k: v for k, v in inputs.items() if k not in ("kv_latent", "kv_scale", "kv_rope")}
    theirs = bf16.reference({**bf16_inputs, "kv_cache": cache}, dict(contract.params))
    assert _close(stages["o_heads_unquantized"], theirs["o_heads"])
    assert _close(stages["c_kv"], theirs["c_kv"]) and _close(stages["k_pe_roped"], theirs["k_pe_roped"])


def test_only_the_appended_row_changes_and_it_holds_the_contracts_codes():
    _, inputs, stages = _case("cache_full")
    lens = inputs["cache_lens"].long()
    rows = torch.arange(lens.numel())
    for name in ("kv_latent", "kv_scale", "kv_rope"):
        kept = torch.ones(stages[name].shape[:2], dtype=torch.bool)
        kept[rows, lens] = False
        assert torch.equal(stages[name][kept], inputs[name].double()[kept]), name
    c_kv = stages["c_kv"].to(torch.bfloat16).float().view(-1, 4, 128)
    scales = c_kv.abs().amax(-1) / 448.0
    assert torch.equal(stages["kv_scale"][rows, lens], scales.double())
    torch_codes = (c_kv / scales[..., None]).to(torch.float8_e4m3fn).double().view(-1, 512)  # round to nearest even
    assert torch.equal(stages["kv_latent"][rows, lens], torch_codes)


def test_round_e4m3_is_round_to_nearest_even_with_subnormals_and_saturation():
    values = torch.tensor([13.5, 14.5, 15.7, 0.0017, -2.5e-3, 2**-10, 3 * 2**-10, 447.0, 500.0, -1e-9], dtype=torch.float64)
    expected = [14.0, 14.0, 16.0, 2**-9, -(2**-9), 0.0, 2 * 2**-9, 448.0, 448.0, -0.0]
    assert quant.round_e4m3(values).tolist() == expected
    # float32 values (scaled in float32): torch's cast from float32 rounds them once, as round_e4m3 does; scaled in
    # float64, a value near a tie was rounded twice by the cast (float64 -> float32 -> e4m3) and the two differed
    wide = (torch.randn(100_000, dtype=torch.float32, generator=torch.Generator().manual_seed(0)) * 30).double()
    assert torch.equal(quant.round_e4m3(wide), wide.float().to(torch.float8_e4m3fn).double())


def test_one_unit_is_allowed_only_near_a_rounding_tie():
    """Every value / scale within the division's reach of an e4m3 midpoint is allowed one unit; no value farther from
    one than a bf16 unit (2^-7 relative: the most a faithful kernel's c_kv or scale may move it) is."""
    c_kv = torch.randn(256, 512, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) * 3
    codes, scales, allowance, scale_allowance = quant.quantize_row(c_kv)
    # a scale: a bf16 unit of it where its block's largest value may round the other way, else two float32 units
    assert set((scale_allowance / scales).unique().tolist()) <= {quant.SCALE_SHIFT, quant.SCALE_DIVISION}
    allowed = allowance > 0
    assert 0 < float(allowed.double().mean()) < 0.02
    ratio = (c_kv.to(torch.bfloat16).float().view(256, 4, 128) / scales[..., None].float()).double().view(256, 512)
    assert torch.equal(codes, quant.round_e4m3(ratio))
    # one unit of the grid at the value (below a power of two, the smaller of its two neighbours' spacings)
    assert torch.equal(allowance[allowed], quant.e4m3_ulp(ratio[allowed]))
    distance = quant._tie_distance(ratio, quant.e4m3_ulp(ratio))
    assert bool(allowed[distance <= quant.E4M3_TIE].all())
    assert float(distance[allowed].max()) <= quant.SCALE_SHIFT


def test_a_faithful_kernel_rounding_the_largest_value_the_other_way_stays_within_the_allowances():
    """The block's largest value a hair below a bf16 midpoint: the reference rounds it down, a kernel whose float32
    layernorm lands a hair above rounds it up, and so gets another scale and, near e4m3 midpoints, other codes.
    Both allowances admit that kernel's row, and only by the bf16 unit the tie allows."""
    c_kv = torch.randn(1, 512, dtype=torch.float64, generator=torch.Generator().manual_seed(3)) * 3
    top = int(c_kv[0, :128].abs().argmax())
    low = c_kv[0, top].to(torch.bfloat16).double()
    step = 2.0 ** (torch.floor(torch.log2(low.abs())) - 7) * torch.sign(low)
    c_kv[0, top] = low + step / 2 - step * 1e-9  # just short of the midpoint, on the side away from zero
    codes, scales, allowance, scale_allowance = quant.quantize_row(c_kv)
    kernel = c_kv.to(torch.bfloat16).double()
    kernel[0, top] = low + step  # the other neighbour
    kernel_scales = (kernel.view(1, 4, 128).abs().amax(-1) / 448.0).float().double()
    kernel_codes = quant.round_e4m3((kernel.float().view(1, 4, 128) / kernel_scales[..., None].float()).double()).view(1, 512)
    assert float(kernel_scales[0, 0]) != float(scales[0, 0])
    assert bool(((kernel_scales - scales).abs() <= scale_allowance).all())
    assert bool(((kernel_codes - codes).abs() <= allowance).all())
    assert not torch.equal(kernel_codes, codes), "the tie moved no code: the test shows nothing about the codes"
