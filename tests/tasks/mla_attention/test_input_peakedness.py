"""The input distributions make attention peaked, as in real models, so that scale and softmax errors and
the four simplifications show on the final output at production lengths (checked on the reference)."""

from __future__ import annotations

import math

import pytest
import torch

from tasks.mla_attention import reference as ref
from tasks.mla_attention.inputs import INPUT_SPECS, make_inputs

PARAMS = ref.DEEPSEEK_V3_PARAMS
CACHE_CAPACITY = 4096
CACHE_LENS = [4095, 3000, 2048, 4000]


def _rel_l2(actual, expected):
    return float((actual - expected).norm() / expected.norm())


def _mean_top1(probs):
    return float(probs.max(dim=-1).values.mean())


@pytest.fixture(scope="module")
def case():
    inputs = make_inputs(len(CACHE_LENS), 8, CACHE_CAPACITY, seed=0, cache_lens=CACHE_LENS)
    return inputs, ref.reference(inputs, PARAMS)


def _decode(inputs, **overrides):
    return ref.decode_step(
        inputs["q_nope"],
        inputs["q_pe"],
        inputs["kv_a"],
        inputs["kv_a_norm_weight"],
        inputs["w_kv_b"],
        inputs["positions"],
        inputs["cache_lens"],
        inputs["kv_cache"],
        PARAMS,
        **overrides,
    )


def test_distributions_are_the_documented_ones():
    stds = {name: spec.get("std") for name, spec in INPUT_SPECS.items()}
    assert stds["q_nope"] == 1.5 and stds["q_pe"] == 2.5 and stds["kv_a"] == 2.0
    assert stds["w_kv_b"] == 0.05 and stds["kv_cache"] == 1.0


def test_attention_is_peaked_at_4096(case):
    inputs, golden = case
    uniform = 1.0 / (inputs["cache_lens"].double() + 1).mean()
    top1 = _mean_top1(golden["probs"])
    assert top1 > 0.1 and top1 > 100 * float(uniform), top1


def test_latent_width_scale_flattens_attention(case, monkeypatch):
    inputs, golden = case
    monkeypatch.setattr(ref, "softmax_scale", lambda params: 1.0 / math.sqrt(576))
    simplified = _decode(inputs)
    assert _mean_top1(simplified["probs"]) < 0.3 * _mean_top1(golden["probs"])
    assert _rel_l2(simplified["o_heads"], golden["o_heads"]) > 0.3


def test_plain_rope_is_visible_on_output(case):
    inputs, golden = case
    simplified = _decode(inputs, angles=ref.rope_angles(inputs["positions"], ref.plain_inv_freq(PARAMS)))
    assert _rel_l2(simplified["q_pe_roped"], golden["q_pe_roped"]) > 0.3
    assert _rel_l2(simplified["o_heads"], golden["o_heads"]) > 0.3


def test_skipped_kv_layernorm_is_visible_on_output(case, monkeypatch):
    inputs, golden = case
    monkeypatch.setattr(ref, "rms_norm", lambda x, weight, eps: x.to(torch.float64))
    simplified = _decode(inputs)
    assert _rel_l2(simplified["c_kv"], golden["c_kv"]) > 0.3
    assert _rel_l2(simplified["o_heads"], golden["o_heads"]) > 0.1


def test_shared_unabsorption_is_visible_on_output(case):
    inputs, golden = case
    _, w_uv = ref.split_kv_b(inputs["w_kv_b"], PARAMS)
    shared = ref.unabsorb(golden["o_latent"], w_uv.mean(0, keepdim=True).expand_as(w_uv))
    assert _rel_l2(shared, golden["o_heads"]) > 0.3
