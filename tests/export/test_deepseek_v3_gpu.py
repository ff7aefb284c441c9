"""On a GPU: the exported ops in DeepseekV3ForCausalLM at a larger shape, decoded teacher-forced from position 0
across pages, captured in a CUDA graph whose replays must give the eager logits, and a decode step timed for the
stock model and the patched ones, eager and replayed. Prints the figures (run with `-s`):

    python -m pytest -p no:xdist -q -s -m gpu tests/export/test_deepseek_v3_gpu.py

The packages are the CPU-profile exports of the honest candidates (tests/export/conftest.py): what this test
establishes on the GPU is the op in the model, not the gate's GPU verdict.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
import deepseek_kit as dk  # noqa: E402

pytestmark = pytest.mark.gpu

BATCH, HEADS, STEPS, CAPACITY, SEED = 8, 16, 160, 320, 0  # 160 steps: three 64-row pages per request
SIZES = {"hidden": 1024, "q_lora_rank": 512}
TIMED_CALLS = 50
# The same bounds as the CPU test (tests/export/test_deepseek_v3.py), against the stock bf16 model's own error.
REL_L2_FACTOR, MAX_ABS_FACTOR = 1.5, 3.0


def _per_call_us(fn, calls: int = TIMED_CALLS) -> float:
    """Wall time per call of `calls` back-to-back calls, host work included, between CUDA events."""
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1000 / calls


def _captured(fn) -> torch.cuda.CUDAGraph:
    """`fn` captured in a CUDA graph, after three warm-up calls on a side stream (as torch's docs do)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph


def _stock_step_times(model: Any, tokens: torch.Tensor) -> tuple[float, float | str]:
    """(eager us, replay us or why it would not capture) of the stock model's step at STEPS past tokens, with
    transformers' StaticCache (its DynamicCache grows and cannot be captured)."""
    from transformers import StaticCache

    cache = StaticCache(config=model.config, max_cache_len=CAPACITY)
    ids, positions, cache_position = (
        tokens[:, :1].clone(),
        torch.zeros(BATCH, 1, dtype=torch.long, device="cuda"),
        torch.zeros(1, dtype=torch.long, device="cuda"),
    )

    cache_argument = dk.cache_keyword(model.forward, cache)  # outside the step: its signature lookup is not timed

    def step():
        return model(
            input_ids=ids, position_ids=positions, use_cache=True, cache_position=cache_position, **cache_argument
        ).logits

    with torch.no_grad():
        for t in range(STEPS):
            ids.copy_(tokens[:, t : t + 1])
            positions.fill_(t)
            cache_position.fill_(t)
            step()
        dk.require_cache_holds(cache, STEPS)
        eager = _per_call_us(step)  # the same slot rewritten each call: one step at STEPS past tokens
        try:
            graph = _captured(step)
        except Exception as err:  # noqa: BLE001 - reported beside the figures, not a failure of the exported op
            return eager, f"not capturable: {type(err).__name__}: {str(err)[:120]}"
        return eager, _per_call_us(graph.replay)


def _exported_steps(
    model: Any, layers: list, tokens: torch.Tensor, eager_logits: torch.Tensor, bound: float
) -> tuple[float, float, float]:
    """Decode the first half eagerly, capture the step, replay the second half (each replay appends: the captured
    in-place length update advances) on each step's token and position copied into the captured buffers. Each
    replay's logits must match the eager decode's within `bound` (a quarter of the stock model's own max error: a
    replay frozen at its capture's position or length is off by more than ten times that, the CPU test's controls).
    Returns (eager us, replay us, the largest replay-vs-eager difference)."""
    ids, positions = tokens[:, :1].clone(), torch.zeros(BATCH, 1, dtype=torch.long, device="cuda")

    def step():
        return model(input_ids=ids, position_ids=positions, use_cache=False).logits

    half = STEPS // 2
    with torch.no_grad():
        for layer in layers:
            layer.reset()
        for t in range(half):
            ids.copy_(tokens[:, t : t + 1])
            positions.fill_(t)
            step()
        lengths = [layer.cache_lens.clone() for layer in layers]
        logits_buffer = torch.empty(0)

        def captured_step():
            nonlocal logits_buffer
            logits_buffer = step()

        graph = _captured(captured_step)
        for layer, length in zip(layers, lengths, strict=True):
            layer.cache_lens.copy_(length)  # the warm-up calls appended rows: the replays append from here
        worst = 0.0
        for t in range(half, STEPS):
            ids.copy_(tokens[:, t : t + 1])
            positions.fill_(t)
            graph.replay()
            worst = max(worst, float((logits_buffer[:, -1].double() - eager_logits[:, t]).abs().max()))
        assert worst <= bound, f"replayed logits differ from eager by {worst} (bound {bound})"
        eager = _per_call_us(step)
        return eager, _per_call_us(graph.replay), worst


def _errors_with(truth_model: Any, tokens: torch.Tensor, truth: torch.Tensor, rmsnorm, mla, paged: bool) -> dict[str, float]:
    """The logit errors of the bf16 model with the exported rmsnorm and/or MLA op in it (None: the stock module)."""
    model = dk.as_dtype(truth_model, torch.bfloat16)
    if rmsnorm is not None:
        dk.patch_rmsnorm(model, rmsnorm)
    if mla is not None:
        dk.patch_attention(model, mla, BATCH, CAPACITY, paged=paged)
        return dk.logit_errors(dk.patched_decode(model, tokens), truth)
    return dk.logit_errors(dk.stock_decode(model, tokens), truth)


def _within(errors: dict[str, float], stock: dict[str, float]) -> bool:
    return errors["rel_l2"] <= REL_L2_FACTOR * stock["rel_l2"] and errors["max_abs"] <= MAX_ABS_FACTOR * stock["max_abs"]


def test_exported_ops_decode_in_the_model_and_replay_in_a_cuda_graph(rmsnorm_package, mla_package, mla_paged_package):
    truth_model = dk.random_model(SEED, layers=2, heads=HEADS, dense=True, **SIZES)
    tokens = torch.randint(
        0, truth_model.config.vocab_size, (BATCH, STEPS), generator=torch.Generator().manual_seed(SEED + 100)
    ).cuda()
    truth = dk.stock_decode(truth_model, tokens)
    stock_model = dk.as_dtype(truth_model, torch.bfloat16)
    stock = dk.logit_errors(dk.stock_decode(stock_model, tokens), truth)
    # Each op alone first, so that a failure names the op (the figures of all three are in its message).
    alone = {
        name: _errors_with(truth_model, tokens, truth, rmsnorm_package[1] if norm else None, package, paged)
        for name, norm, package, paged in (
            ("rmsnorm alone", True, None, False),
            ("mla alone", False, mla_package[1], False),
            ("mla paged alone", False, mla_paged_package[1], True),
        )
    }
    figures: dict[str, tuple] = {}
    for name, package, paged in (("exported", mla_package, False), ("exported paged", mla_paged_package, True)):
        model = dk.as_dtype(truth_model, torch.bfloat16)
        dk.patch_rmsnorm(model, rmsnorm_package[1])
        layers = dk.patch_attention(model, package[1], BATCH, CAPACITY, paged=paged)
        logits = dk.patched_decode(model, tokens)
        errors = dk.logit_errors(logits, truth)
        for label, seen in [*alone.items(), (name, errors)]:
            assert _within(seen, stock), (label, seen, "stock", stock, "each op alone", alone)
        figures[name] = _exported_steps(model, layers, tokens, logits, 0.25 * stock["max_abs"])
    # Last: a capture that fails leaves the stock figures saying why, after the exported ones were taken.
    figures["stock"] = _stock_step_times(stock_model, tokens)
    shape = f"B={BATCH}, H={HEADS}, 2 dense layers, hidden {SIZES['hidden']}, step at {STEPS} past tokens"
    print(f"\n{torch.cuda.get_device_name()}; {shape}")
    print(f"stock logits error vs float64: {stock}")
    for name, (eager, replay, *worst) in figures.items():
        shown = f"{replay:.1f} us" if isinstance(replay, float) else replay
        differs = f" (replay vs eager logits: max diff {worst[0]:.3g})" if worst else ""
        print(f"{name:>15}: eager {eager:.1f} us per step, CUDA graph replay {shown}{differs}")


def test_a_call_with_tensors_on_two_devices_is_refused_before_any_launch(rmsnorm_package):
    _, package = rmsnorm_package
    x = torch.randn(4, 64, dtype=torch.bfloat16, device="cuda")
    y = torch.full_like(x, float("nan"))
    with pytest.raises(package.BoundaryError, match="weight is on cpu, the other arguments on cuda"):
        torch.ops.ferret.rmsnorm(x, torch.ones(64, dtype=torch.bfloat16), y)
    assert torch.isnan(y).all()
