"""The served-MLA benchmark (`python -m benchmarks mla-served`, benchmarks/mla_served.py): its CPU rehearsal end to end
(each step checked on its own contract's inputs before it is timed, the summaries' ratios, FlashMLA's rows skipped with
their reason), and the pieces only a GPU reaches: FlashMLA's per-tensor quantization, the float64 attention its FP8
output is checked against, and the calls of its FP8 and s_q = 2 cores, driven here through a stand-in FlashMLA that
computes what the real one is documented to."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]


def test_the_cpu_rehearsal_checks_every_step_then_times_them_and_gives_the_ratios(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "mla-served", "--cpu", "--out", str(tmp_path), "--rounds", "1"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        cwd=REPO,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "mla-served-bench.jsonl").read_text().splitlines()]
    steps = {r["impl"].split(" (")[0]: r for r in rows}
    for label in ("bf16 step", "fp8 step", "mtp step"):
        assert steps[label]["ok"] and steps[label]["us"] > 0 and steps[label]["floor_us"] > 0, steps[label]
    for peer in ("FlashMLA dense FP8 core", "FlashMLA core at s_q = 2"):
        assert steps[peer].get("skipped") and "us" not in steps[peer], steps[peer]
    summary = steps["fp8 step over bf16 step"]
    assert summary["speedup"] == pytest.approx(steps["bf16 step"]["us"] / steps["fp8 step"]["us"])
    assert steps["FlashMLA core at s_q = 2 over our whole step"]["speedup"] is None  # no FlashMLA time here
    assert {r["variant"] for r in rows} == {"fp8", "mtp"}
    assert "fp8 step over bf16 step" in (tmp_path / "mla-served-bench.md").read_text()


def test_an_unknown_shape_is_refused_naming_the_known_ones(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "mla-served", "--cpu", "--out", str(tmp_path), "--shapes", "h1_b1_l1"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        cwd=REPO,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2 and "unknown ['h1_b1_l1']" in done.stderr and "h16_b2_l64" in done.stderr


def test_flashmla_quantization_is_one_scale_for_the_tensor_within_half_an_e4m3_step():
    from benchmarks.mla_served import E4M3_MAX, per_tensor_e4m3

    values = torch.randn(4, 64, 576, dtype=torch.float64) * 3
    codes, scale = per_tensor_e4m3(values)
    assert codes.dtype == torch.float8_e4m3fn and scale.shape == (1,) and scale.dtype == torch.float32
    assert float(codes.float().abs().max()) == E4M3_MAX  # the largest magnitude maps to e4m3's largest value
    back = codes.double() * scale.double()
    # e4m3 keeps 3 mantissa bits: a relative step of 2^-3, half of it at rounding (normal values)
    normal = values.abs() > 2.0**-6 * float(scale)
    assert ((back - values).abs()[normal] <= values.abs()[normal] * 2.0**-4 * (1 + 1e-6)).all()


def test_the_float64_attention_is_each_requests_softmax_over_its_own_rows():
    from benchmarks.mla_served import attention_f64

    generator = torch.Generator().manual_seed(3)
    q = torch.randn(2, 3, 8, generator=generator, dtype=torch.float64)
    cache = torch.randn(2, 5, 8, generator=generator, dtype=torch.float64)
    lengths = torch.tensor([2, 5])
    out = attention_f64(q, cache, lengths, 0.5, rank=6)
    for b, length in enumerate(lengths.tolist()):
        weights = torch.softmax(q[b] @ cache[b, :length].T * 0.5, dim=-1)
        torch.testing.assert_close(out[b], weights @ cache[b, :length, :6], rtol=0, atol=1e-12)


def test_the_summary_says_whether_the_target_shape_meets_its_speedup():
    from benchmarks.mla_served import TARGET, ratio_row

    def summary(shape, rows):
        return ratio_row(shape, rows, "fp8 step over bf16 step", "bf16 step", "fp8 step")

    rows = [{"impl": "bf16 step (wgmma_mla.py)", "us": 130.0}, {"impl": "fp8 step (triton_mla_fp8.py)", "us": 100.0}]
    met = summary(TARGET[0], rows)
    assert met["speedup"] == pytest.approx(1.3) and met["target_met"]
    missed = summary(TARGET[0], [rows[0], {**rows[1], "us": 110.0}])
    assert not missed["target_met"]
    elsewhere = summary("h128_b1_l4096", rows)
    assert "target" not in elsewhere and elsewhere["speedup"] == pytest.approx(1.3)
    unchecked = summary(TARGET[0], [rows[0], {"impl": "fp8 step (triton_mla_fp8.py)", "ok": False}])
    assert unchecked["speedup"] is None and not unchecked["target_met"]


class StandInFlashMLA:
    """What FlashMLA's dense decode computes, in float64 on the CPU: queries [B, s_q, H, 576] over the pages the block
    table names, the first seqlens[b] rows (with `causal`, token i of s_q over seqlens[b] - (s_q - 1 - i)), values the
    first 512 columns; codes times their descale where given. `ignore_causal` is a broken peer."""

    def __init__(self, ignore_causal: bool = False):
        self.ignore_causal = ignore_causal

    def get_mla_metadata(self):
        return types.SimpleNamespace(), None

    def get_mla_decoding_metadata(self, seqlens, tokens, heads_k, is_fp8_kvcache=False, use_legacy=False):
        assert is_fp8_kvcache and use_legacy and heads_k == 1
        return None, None

    def flash_mla_with_kvcache(self, q, pages, table, seqlens, rank, meta, splits, softmax_scale, causal, use_legacy, **fp8):
        batch, tokens, heads, width = q.shape
        cache = pages[table.long()].reshape(batch, -1, width).double() * _descale(fp8.get("descale_k"))
        queries = q.double() * _descale(fp8.get("descale_q"))
        out = torch.empty(batch, tokens, heads, rank, dtype=torch.float64)
        for b in range(batch):
            for i in range(tokens):
                seen = int(seqlens[b]) - (tokens - 1 - i if causal and not self.ignore_causal else 0)
                weights = torch.softmax(queries[b, i] @ cache[b, :seen].T * softmax_scale, dim=-1)
                out[b, i] = weights @ cache[b, :seen, :rank]
        return out.to(torch.bfloat16), None


def _descale(value):
    return 1.0 if value is None else value.double()


@pytest.fixture(scope="module")
def served():
    from benchmarks import mla_served

    return mla_served


def test_flashmla_at_two_query_tokens_is_called_causal_on_the_steps_appended_cache(served):
    from ferret.contract.load import load_contract

    checked = served.check_step(served.MTP, "h16_b2_l64", served.CPU_SHAPES["h16_b2_l64"], "cpu", "cpu")
    assert checked.row["ok"], checked.row
    contract = load_contract(served.MTP.contract)
    limit = contract.tolerance("bfloat16", "o_latent").rel_l2
    measure = served.flash_mtp(checked, dict(contract.params), limit)
    call, error, _ = measure(StandInFlashMLA())
    assert error <= limit and call()[0].shape == checked.golden["o_latent"].shape
    _, broken, _ = measure(StandInFlashMLA(ignore_causal=True))  # token 0 seeing token 1's row
    assert broken > limit


def test_flashmla_fp8_is_given_per_tensor_codes_and_their_descales(served):
    from ferret.contract.load import load_contract

    checked = served.check_step(served.FP8, "h16_b2_l64", served.CPU_SHAPES["h16_b2_l64"], "cpu", "cpu")
    assert checked.row["ok"], checked.row
    contract = load_contract(served.FP8.contract)
    limit = contract.tolerance("bfloat16", "o_latent").rel_l2
    call, error, _ = served.flash_fp8(checked, dict(contract.params), limit)(StandInFlashMLA())
    assert error <= limit and call()[0].dtype == torch.bfloat16
