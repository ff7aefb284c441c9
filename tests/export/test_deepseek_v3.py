"""The exported ops inside transformers' DeepseekV3ForCausalLM (tests/fixtures/deepseek_kit.py): a small model with
DeepSeek-V3's MLA sizes and random weights, decoded teacher-forced from position 0, stock and with the exported
rmsnorm in every RMSNorm module, and with the exported MLA step (contiguous and paged) as its attention.

The criterion is the logits, never the tokens (random weights flip near-ties): the patched model's error against
the float64 model must stay within a bound measured from the stock bf16 model's own error against it. The
bounds: rel_l2 at most 1.5x the stock path's, max_abs at most 3x. Measured on seeds 0-5 (B = 2, 8 steps), the
exported paths' ratios to the stock error were 0.78-1.12 in rel_l2 and 0.47-1.77 in max_abs (max_abs, one entry,
is the noisier); decoding at doubled positions (a wrong relative position, the error a rope or cache-index slip
makes) gave 13-39x, and an attention that forgets its past more than 50x in rel_l2 (the controls below).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
import deepseek_kit as dk  # noqa: E402

pytest.importorskip("transformers")

BATCH, STEPS, CAPACITY, SEED = 2, 8, 16, 0
REL_L2_FACTOR, MAX_ABS_FACTOR = 1.5, 3.0


@pytest.fixture(scope="module")
def decoded():
    """(the float64 model, the tokens, its logits, the stock bf16 model's errors against them)."""
    model = dk.random_model(SEED)
    tokens = torch.randint(0, model.config.vocab_size, (BATCH, STEPS), generator=torch.Generator().manual_seed(SEED + 100))
    tokens = tokens.to(dk.DEVICE)
    truth = dk.stock_decode(model, tokens)
    stock = dk.logit_errors(dk.stock_decode(dk.as_dtype(model, torch.bfloat16), tokens), truth)
    return model, tokens, truth, stock


def _within_stock_bound(errors: dict, stock: dict) -> bool:
    return errors["rel_l2"] <= REL_L2_FACTOR * stock["rel_l2"] and errors["max_abs"] <= MAX_ABS_FACTOR * stock["max_abs"]


def test_a_stock_decode_whose_cache_the_model_ignores_is_refused(monkeypatch, decoded):
    """The truth is the stock model decoding with its past. Under a cache keyword the model does not know (transformers
    renamed it: `tasks.mla_attention.oracle.cache_keyword`) the keyword is swallowed, every step attends to its own
    token alone, and an exact op is measured against that; the stock decode refuses instead."""
    model, tokens, _, _ = decoded
    monkeypatch.setattr(dk, "cache_keyword", lambda forward, cache: {"not_a_cache_argument": cache})
    with pytest.raises(AssertionError, match="holds 0 tokens after 1 steps: it was not used"):
        dk.stock_decode(model, tokens[:, :2])


def test_the_op_params_are_the_models(mla_package, decoded):
    """The exported op fixes the contract's params: the model must be the one they describe."""
    _, package = mla_package
    config, params = decoded[0].config, package.MANIFEST["params"]
    assert [params[k] for k in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")] == [
        config.kv_lora_rank,
        config.qk_nope_head_dim,
        config.qk_rope_head_dim,
        config.v_head_dim,
    ]
    rope = config.rope_parameters
    assert rope["rope_type"] == "yarn" and config.rope_interleave
    assert all(rope[k] == params["rope_scaling"][k] for k in ("factor", "beta_fast", "beta_slow", "mscale", "mscale_all_dim"))


def test_rmsnorm_in_every_rmsnorm_module_keeps_the_logits_within_the_stock_bound(rmsnorm_package, decoded):
    _, package = rmsnorm_package
    model, tokens, truth, stock = decoded
    patched = dk.as_dtype(model, torch.bfloat16)
    assert dk.patch_rmsnorm(patched, package) == 4 * 2 + 1  # per layer input, post-attention, q_a, kv_a; the final norm
    errors = dk.logit_errors(dk.stock_decode(patched, tokens), truth)
    assert _within_stock_bound(errors, stock), (errors, stock)


@pytest.mark.parametrize("paged", [False, True], ids=["contiguous", "paged"])
def test_the_mla_step_as_the_attention_keeps_the_logits_within_the_stock_bound(request, decoded, paged):
    _, package = request.getfixturevalue("mla_paged_package" if paged else "mla_package")
    model, tokens, truth, stock = decoded
    patched = dk.as_dtype(model, torch.bfloat16)
    layers = dk.patch_attention(patched, package, BATCH, CAPACITY, paged=paged)
    errors = dk.logit_errors(dk.patched_decode(patched, tokens), truth)
    assert _within_stock_bound(errors, stock), (errors, stock)
    for layer in layers:
        assert layer.cache_lens.tolist() == [STEPS] * BATCH
        if paged:  # every page no request owns still holds NaN: nothing was written outside the block table
            owned = set(layer.block_table.flatten().tolist())
            unowned = [p for p in range(layer.kv_cache.shape[0]) if p not in owned]
            assert unowned and torch.isnan(layer.kv_cache[unowned]).all()
        else:
            assert not torch.isnan(layer.kv_cache[:, :STEPS]).any() and torch.isnan(layer.kv_cache[:, STEPS:]).all()


def test_the_bound_rejects_an_attention_at_wrong_positions_or_without_its_past(mla_package, decoded):
    """The controls: the same patched model decoded at doubled positions, and with its cache forgotten each step."""
    _, package = mla_package
    model, tokens, truth, stock = decoded
    patched = dk.as_dtype(model, torch.bfloat16)
    layers = dk.patch_attention(patched, package, BATCH, CAPACITY)

    def doubled(m: Any, ids, positions):
        return m(input_ids=ids, position_ids=positions * 2, use_cache=False).logits

    def forgetting(m: Any, ids, positions):
        for layer in layers:
            layer.cache_lens.zero_()
        return m(input_ids=ids, position_ids=positions, use_cache=False).logits

    for step in (doubled, forgetting):
        errors = dk.logit_errors(dk.patched_decode(patched, tokens, step), truth)
        assert errors["rel_l2"] > 5 * REL_L2_FACTOR * stock["rel_l2"], (step.__name__, errors, stock)


def test_torch_compile_keeps_each_exported_op_one_node_in_one_graph(rmsnorm_package, mla_package):
    """The whole patched decode step traced with fullgraph=True (every layer dense: transformers' own MoE loop is
    data-dependent and breaks the graph by itself), its graph read: 7 rmsnorm nodes (3 per layer, the final norm;
    kv_a_layernorm is inside the MLA op) and one MLA node per layer, and the same logits as eager."""
    model: Any = dk.as_dtype(dk.random_model(SEED, dense=True), torch.bfloat16)
    dk.patch_rmsnorm(model, rmsnorm_package[1])
    layers = dk.patch_attention(model, mla_package[1], BATCH, CAPACITY)
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    def step(ids, positions):
        return model(input_ids=ids, position_ids=positions, use_cache=False).logits

    ids, positions = torch.tensor([[3], [5]], device=dk.DEVICE), torch.zeros(BATCH, 1, dtype=torch.long, device=dk.DEVICE)
    torch._dynamo.reset()
    compiled = torch.compile(step, backend=backend, fullgraph=True)
    got = compiled(ids, positions)
    for layer in layers:
        layer.reset()
    assert torch.equal(got, step(ids, positions))
    assert len(graphs) == 1
    ops = [n.target for n in graphs[0].graph.nodes if n.op == "call_function" and "ferret" in str(n.target)]
    assert ops.count(torch.ops.ferret.rmsnorm) == 7 and ops.count(torch.ops.ferret.mla_attention) == 2 and len(ops) == 9
