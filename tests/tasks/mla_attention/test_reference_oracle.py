"""The canonical reference: DeepSeek-V3's YaRN numbers, its stage invariants, and agreement with
transformers' DeepseekV3Attention configured (and verified) as DeepSeek-V3."""

from __future__ import annotations

import math

import pytest
import torch

from tasks.mla_attention import reference as ref
from tasks.mla_attention.inputs import make_inputs
from tasks.mla_attention.oracle import (
    EXPECTED_SCALE,
    TOLERANCE,
    check_oracle_is_deepseek_v3,
    deepseek_v3_oracle_config,
    validate_against_oracle,
)

PARAMS = ref.DEEPSEEK_V3_PARAMS


def test_yarn_correction_range_and_frequencies():
    assert ref.yarn_correction_range(PARAMS) == (10, 23)
    inv_freq, plain = ref.yarn_inv_freq(PARAMS), ref.plain_inv_freq(PARAMS)
    assert inv_freq.shape == (32,)
    torch.testing.assert_close(
        plain, torch.tensor([10000.0 ** (-2 * i / 64) for i in range(32)], dtype=torch.float64), rtol=1e-15, atol=0
    )
    torch.testing.assert_close(inv_freq[:11], plain[:11], rtol=1e-15, atol=0)  # dims 0..10 unchanged
    torch.testing.assert_close(inv_freq[23:], plain[23:] / 40, rtol=1e-15, atol=0)  # 23..31 divided by 40
    between = slice(11, 23)
    assert bool((inv_freq[between] < plain[between]).all() and (inv_freq[between] > plain[between] / 40).all())
    ramp = (torch.arange(11, 23, dtype=torch.float64) - 10) / 13
    torch.testing.assert_close(inv_freq[between], plain[between] * (1 - ramp) + plain[between] / 40 * ramp, rtol=1e-15, atol=0)


def test_softmax_scale_and_rope_magnitude():
    mscale = ref.yarn_mscale(40.0, 1.0)
    assert mscale == pytest.approx(1.368888, abs=1e-6)
    assert ref.softmax_scale(PARAMS) == pytest.approx(EXPECTED_SCALE, abs=1e-7)
    assert ref.softmax_scale(PARAMS) == pytest.approx(mscale**2 / math.sqrt(192), rel=1e-15)
    assert ref.rope_magnitude(PARAMS) == 1.0  # DeepSeek-V3 leaves cos/sin unscaled
    plain_params = {**PARAMS, "rope_scaling": None}
    assert ref.softmax_scale(plain_params) == pytest.approx(1 / math.sqrt(192), rel=1e-15)


def test_rotation_pairs_are_interleaved():
    x = torch.zeros(64, dtype=torch.float64)
    x[0] = 1.0  # pair 0 = (x0, x1), rotated by angle[0]
    angles = torch.zeros(32, dtype=torch.float64)
    angles[0] = math.pi / 2
    rotated = ref.rotate_interleaved(x, angles)
    expected = torch.zeros(64, dtype=torch.float64)
    expected[1] = 1.0
    torch.testing.assert_close(rotated, expected, atol=1e-15, rtol=0)


def test_reference_stage_invariants():
    inputs = make_inputs(3, 4, 24, seed=0, cache_lens=[0, 23, 9])
    before = {name: t.clone() for name, t in inputs.items()}
    stages = ref.reference(inputs, PARAMS)
    assert list(stages) == [*ref.STAGES, "scores_error_scale"]  # the scores' error scale: judged against, not a stage
    for name in inputs:
        assert torch.equal(inputs[name], before[name]), f"reference mutated {name}"
    lens = inputs["cache_lens"].long()
    visible = torch.arange(24)[None, :] <= lens[:, None]
    assert bool(torch.isfinite(stages["scores"]).eq(visible[:, None, :]).all())
    assert bool((stages["probs"][~visible[:, None, :].expand_as(stages["probs"])] == 0).all())
    torch.testing.assert_close(stages["probs"].sum(-1), torch.ones(3, 4, dtype=torch.float64))
    appended = torch.zeros(3, 24, dtype=torch.bool)
    appended[torch.arange(3), lens] = True
    assert torch.equal(stages["kv_cache"][~appended], inputs["kv_cache"].double()[~appended])
    torch.testing.assert_close(stages["kv_cache"][appended][:, :512], stages["c_kv"])
    # A request with an empty cache attends only to its own new token.
    torch.testing.assert_close(stages["o_latent"][0], stages["c_kv"][0].expand(4, 512))
    # Rows past len are not part of the sequence: whatever they hold never reaches the output.
    for b, length in enumerate(lens.tolist()):
        inputs["kv_cache"][b, length + 1 :] = float("nan")
    poisoned = ref.reference(inputs, PARAMS)
    assert torch.equal(poisoned["o_heads"], stages["o_heads"])


def test_default_transformers_config_is_the_plain_rope_trap():
    """Without rope_parameters the oracle uses plain rope and scale 1/sqrt(192); the identity check refuses it."""
    from transformers import DeepseekV3Config
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3Attention, DeepseekV3RotaryEmbedding

    config = DeepseekV3Config(
        hidden_size=256,
        num_attention_heads=4,
        num_key_value_heads=4,
        q_lora_rank=64,
        num_hidden_layers=1,
        attn_implementation="eager",  # pyright: ignore[reportCallIssue]
    )
    identity = check_oracle_is_deepseek_v3(DeepseekV3Attention(config, 0), DeepseekV3RotaryEmbedding(config))
    assert not identity["ok"]
    assert identity["scaling"] == pytest.approx(1 / math.sqrt(192), rel=1e-6)


def test_oracle_is_configured_as_deepseek_v3():
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3Attention, DeepseekV3RotaryEmbedding

    config = deepseek_v3_oracle_config()
    attn, rotary = DeepseekV3Attention(config, 0), DeepseekV3RotaryEmbedding(config)
    assert attn.scaling == pytest.approx(EXPECTED_SCALE, abs=1e-6)
    torch.testing.assert_close(rotary.inv_freq.double(), ref.yarn_inv_freq(PARAMS), rtol=1e-6, atol=0)
    assert config.rope_interleave and attn.qk_head_dim == 192 and attn.kv_lora_rank == 512
    assert check_oracle_is_deepseek_v3(attn, rotary)["ok"]


def test_reference_agrees_with_transformers_oracle():
    result = validate_against_oracle()
    assert result["oracle"] == "transformers.DeepseekV3Attention"
    assert result["oracle_is_deepseek_v3"]
    assert result["scaling"] == pytest.approx(EXPECTED_SCALE, abs=1e-6)
    assert min(min(p) for p in result["positions"]) > 4096
    assert result["max_rel_err_output"] < TOLERANCE, result
    assert result["max_rel_err_cache"] < TOLERANCE, result
    assert result["max_rel_err_output_exact_angles"] < result["exact_angle_tolerance"], result
    assert result["max_rel_err_cache_exact_angles"] < result["exact_angle_tolerance"], result
    assert result["decode_mean_top1_prob"] > 0.3, "oracle comparison on flat attention would hide scale errors"
    assert result["passed"]


def _rotate_half(x, angles, magnitude=1.0):
    half = x.shape[-1] // 2
    cos, sin = torch.cos(angles) * magnitude, torch.sin(angles) * magnitude
    return torch.cat((x[..., :half] * cos - x[..., half:] * sin, x[..., half:] * cos + x[..., :half] * sin), -1)


_split_kv_b = ref.split_kv_b  # the correct one, captured before any test patches it

REFERENCE_BUGS = {
    "plain_rope": ("yarn_inv_freq", lambda params: ref.plain_inv_freq(params)),
    "latent_width_scale": ("softmax_scale", lambda params: 1.0 / math.sqrt(576)),
    "no_layernorms": ("rms_norm", lambda x, weight, eps: x.to(torch.float64)),
    "swapped_kv_b_split": ("split_kv_b", lambda w, params: tuple(reversed(_split_kv_b(w, params)))),
    "rotate_half_layout": ("rotate_interleaved", _rotate_half),
}


@pytest.mark.parametrize("bug", REFERENCE_BUGS)
def test_oracle_comparison_catches_a_wrong_reference(bug, monkeypatch):
    name, replacement = REFERENCE_BUGS[bug]
    monkeypatch.setattr(ref, name, replacement)
    result = validate_against_oracle()
    assert not result["passed"], result
    assert max(result["max_rel_err_output"], result["max_rel_err_output_exact_angles"]) > 10 * TOLERANCE, result
