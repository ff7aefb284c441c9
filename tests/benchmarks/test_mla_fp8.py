"""The FP8 MLA benchmark (`python -m benchmarks mla-fp8`, benchmarks/mla_fp8.py): its CPU rehearsal end to end (both
steps checked on their own contract's inputs before they are timed, the summary's speed-up, FlashMLA's row skipped
with its reason), and the pieces only a GPU reaches: FlashMLA's per-tensor quantization and the float64 attention its
output is checked against."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]


def test_the_cpu_rehearsal_checks_both_steps_then_times_them_and_gives_the_ratio(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "mla-fp8", "--cpu", "--out", str(tmp_path), "--rounds", "1"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        cwd=REPO,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "mla-fp8-bench.jsonl").read_text().splitlines()]
    steps = {r["impl"].split(" (")[0]: r for r in rows}
    for label in ("bf16 step", "fp8 step"):
        assert steps[label]["ok"] and steps[label]["us"] > 0 and steps[label]["floor_us"] > 0, steps[label]
    flash = steps["FlashMLA dense FP8 core"]
    assert flash.get("skipped") and "us" not in flash, flash
    summary = steps["fp8 step over bf16 step"]
    assert summary["speedup"] == pytest.approx(steps["bf16 step"]["us"] / steps["fp8 step"]["us"])
    assert "fp8 step over bf16 step" in (tmp_path / "mla-fp8-bench.md").read_text()


def test_an_unknown_shape_is_refused_naming_the_known_ones(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "mla-fp8", "--cpu", "--out", str(tmp_path), "--shapes", "h1_b1_l1"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        cwd=REPO,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2 and "unknown ['h1_b1_l1']" in done.stderr and "h16_b2_l64" in done.stderr


def test_flashmla_quantization_is_one_scale_for_the_tensor_within_half_an_e4m3_step():
    from benchmarks.mla_fp8 import E4M3_MAX, per_tensor_e4m3

    values = torch.randn(4, 64, 576, dtype=torch.float64) * 3
    codes, scale = per_tensor_e4m3(values)
    assert codes.dtype == torch.float8_e4m3fn and scale.shape == (1,) and scale.dtype == torch.float32
    assert float(codes.float().abs().max()) == E4M3_MAX  # the largest magnitude maps to e4m3's largest value
    back = codes.double() * scale.double()
    # e4m3 keeps 3 mantissa bits: a relative step of 2^-3, half of it at rounding (normal values)
    normal = values.abs() > 2.0**-6 * float(scale)
    assert ((back - values).abs()[normal] <= values.abs()[normal] * 2.0**-4 * (1 + 1e-6)).all()


def test_the_float64_attention_is_each_requests_softmax_over_its_own_rows():
    from benchmarks.mla_fp8 import attention_f64

    generator = torch.Generator().manual_seed(3)
    q = torch.randn(2, 3, 8, generator=generator, dtype=torch.float64)
    cache = torch.randn(2, 5, 8, generator=generator, dtype=torch.float64)
    lengths = torch.tensor([2, 5])
    out = attention_f64(q, cache, lengths, 0.5, rank=6)
    for b, length in enumerate(lengths.tolist()):
        weights = torch.softmax(q[b] @ cache[b, :length].T * 0.5, dim=-1)
        torch.testing.assert_close(out[b], weights @ cache[b, :length, :6], rtol=0, atol=1e-12)


def test_the_summary_says_whether_the_target_shape_meets_its_speedup():
    from benchmarks.mla_fp8 import TARGET, summary_row

    rows = [{"impl": "bf16 step (wgmma_mla.py)", "us": 130.0}, {"impl": "fp8 step (triton_mla_fp8.py)", "us": 100.0}]
    met = summary_row(TARGET[0], rows)
    assert met["speedup"] == pytest.approx(1.3) and met["target_met"]
    missed = summary_row(TARGET[0], [rows[0], {**rows[1], "us": 110.0}])
    assert not missed["target_met"]
    elsewhere = summary_row("h128_b1_l4096", rows)
    assert "target" not in elsewhere and elsewhere["speedup"] == pytest.approx(1.3)
    unchecked = summary_row(TARGET[0], [rows[0], {"impl": "fp8 step (triton_mla_fp8.py)", "ok": False}])
    assert unchecked["speedup"] is None and not unchecked["target_met"]
