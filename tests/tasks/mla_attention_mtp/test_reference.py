"""The multi-token MLA reference: S query tokens at once equal S single-token decode steps one after the other (the
bf16 contract's reference, itself validated against transformers' DeepseekV3Attention), and it is causal.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ferret.contract.load import load_contract
from ferret.gate.inputs import draw_inputs
from tasks.mla_attention_mtp import reference

CONTRACT = Path(__file__).resolve().parents[3] / "contracts" / "mla_attention_mtp.yaml"
TOLERANCE = 1e-9  # the contract's validation.tolerance: the same float64 functions, in another order at most
STAGES = ("c_kv", "q_pe_roped", "k_pe_roped", "kv_cache", "q_absorbed", "scores", "probs", "o_latent", "o_heads")


def _inputs(name: str):
    contract = load_contract(CONTRACT, require_tolerances=False)
    case = next(c for c in contract.cases.cpu if c.name == name)
    return dict(contract.params), draw_inputs(contract, case, "bfloat16")


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    finite = torch.isfinite(b)
    if not torch.equal(torch.isfinite(a), finite):
        return False
    return bool(finite.any()) and float((a[finite] - b[finite]).abs().max()) <= TOLERANCE * float(b[finite].abs().max())


@pytest.mark.parametrize("name", [c.name for c in load_contract(CONTRACT, require_tolerances=False).cases.cpu])
def test_s_query_tokens_are_s_sequential_decode_steps(name):
    params, inputs = _inputs(name)
    untouched = {k: v.clone() for k, v in inputs.items()}
    stages, steps = reference.reference(inputs, params), reference.sequential_steps(inputs, params)
    assert all(torch.equal(inputs[k], untouched[k]) for k in inputs), "the reference must not mutate its inputs"
    for stage in STAGES:
        assert stages[stage].shape == steps[stage].shape, stage
        assert _close(stages[stage], steps[stage]), stage


def test_token_i_sees_the_new_tokens_up_to_i_and_no_further():
    params, inputs = _inputs("first_tokens")  # S = 3, empty caches: the new tokens are all there is
    stages = reference.reference(inputs, params)
    visible = torch.isfinite(stages["scores"])  # [B, S, H, L]
    for i in range(inputs["q_nope"].shape[1]):
        assert bool(visible[:, i, :, : i + 1].all()) and not bool(visible[:, i, :, i + 1 :].any()), i
    later = {k: v.clone() for k, v in inputs.items()}
    later["kv_a"][:, 2] = later["kv_a"][:, 2].neg()  # token 2's row changes: tokens 0 and 1 must not see it
    moved = reference.reference(later, params)["o_heads"]
    assert torch.equal(moved[:, :2], stages["o_heads"][:, :2]) and not torch.equal(moved[:, 2], stages["o_heads"][:, 2])


def test_rows_land_at_cache_lens_plus_i_and_positions_advance_by_one():
    params, inputs = _inputs("decode_from_start")
    stages = reference.reference(inputs, params)
    lens = inputs["cache_lens"].long()
    for b in range(lens.shape[0]):
        for i in range(inputs["q_nope"].shape[1]):
            row = stages["kv_cache"][b, lens[b] + i]
            assert torch.equal(row, torch.cat((stages["c_kv"][b, i], stages["k_pe_roped"][b, i])))
    one = {k: v.clone() for k, v in inputs.items()}
    one["positions"] = one["positions"] + 1  # token 0 one step later is token 1's rope
    assert torch.equal(
        reference.reference(one, params)["q_pe_roped"][:, 0],
        reference.reference({**inputs, "q_pe": inputs["q_pe"][:, [0, 0]]}, params)["q_pe_roped"][:, 1],
    )


def test_an_s_q_outside_what_the_reference_supports_is_refused():
    params, inputs = _inputs("four_tokens")
    five = {k: v for k, v in inputs.items()}
    for name in ("q_nope", "q_pe", "kv_a"):
        five[name] = torch.cat((inputs[name], inputs[name][:, :1]), dim=1)
    with pytest.raises(ValueError, match="s_q"):
        reference.reference(five, params)


def test_the_roofline_counts_each_tokens_own_reach():
    """Flops over the rows each query token attends (cache_lens + i + 1), bytes over the rows a request needs
    (cache_lens + S): counted here token by token, against the contract's expressions."""
    from ferret.contract.roofline import count_roofline

    contract = load_contract(CONTRACT, require_tolerances=False)
    case = next(c for c in contract.cases.cpu if c.name == "four_tokens")
    inputs = draw_inputs(contract, case, "bfloat16")
    batch, s_q, heads = (case.dims[d] for d in ("B", "S", "H"))
    lens = inputs["cache_lens"].tolist()
    attended = sum(n + i + 1 for n in lens for i in range(s_q))
    flops = 2 * heads * attended * (576 + 512) + 4 * batch * s_q * heads * 128 * 512
    others = sum(t.numel() * t.element_size() for name, t in inputs.items() if name != "kv_cache")
    count = count_roofline(contract, case.dims, inputs, "bfloat16")
    assert count.flops == flops
    assert count.bytes == sum(n + s_q for n in lens) * 1152 + others + batch * s_q * heads * 128 * 2
