"""benchmarks/q_prepare_probe.py under the CPU interpreter (--cpu): every launch variant of the template's kernel 2,
in both forms, writes every element of q and the same q as run()'s own launch (the probe's rows say so), so the
variants it times on a GPU are the same computation; the GEMV and one-wave forms' variants write q within one bf16 ulp
of the streamed form's and the reordering of fp32 sums (the probe's within_one_rounding); the TMA form's write the
streamed form's q bitwise."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def _probe_rows(tmp_path, *flags: str) -> list[dict]:
    """The probe's rows, run under the CPU interpreter with `flags`."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "q_prepare_probe.py"), "--out", str(tmp_path), "--cpu",
                           *flags], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return [json.loads(line) for line in (tmp_path / "q-prepare-probe.jsonl").read_text().splitlines()]


def test_every_launch_variant_writes_the_same_q_as_runs_launch(tmp_path):
    rows = _probe_rows(tmp_path)
    forms = {row["form"] for row in rows}
    assert forms == {"batch_blocks", "streamed"}
    assert len(rows) == 2 * 7  # seven launch variants of each form, at the CPU shape
    assert all(row["ok"] for row in rows), [row for row in rows if not row["ok"]]


def test_every_gemv_variant_writes_q_within_one_rounding_of_the_streamed_form(tmp_path):
    gemv = [row for row in _probe_rows(tmp_path, "--gemv-form", "--shapes", "2:4") if row["form"] == "gemv"]
    assert len(gemv) == 5  # GEMV_VARIANTS
    assert all(row["ok"] for row in gemv), [row for row in gemv if not row["ok"]]


def test_every_tma_variant_writes_the_streamed_forms_q_bitwise(tmp_path):
    """The TMA form (descriptor loads and stores, column blocks pipelined) at a batch smaller than its row block: the
    rows past the batch are read as zeros and never stored, and every element of q is the streamed form's."""
    tma = [row for row in _probe_rows(tmp_path, "--tma-form", "--shapes", "2:4") if row["form"] == "tma"]
    assert len(tma) == 7  # TMA_VARIANTS
    assert all(row["ok"] and row["bitwise"] for row in tma), [row for row in tma if not row["ok"]]


def test_every_one_wave_variant_writes_the_streamed_forms_q_within_one_rounding(tmp_path):
    """The one-wave form (rope folded into the first column block, optional pipelined K-blocks) at a batch smaller
    than its row block and at one that spans two blocks of 16: every element of q within one bf16 ulp of the streamed
    form's and the reordering of its fp32 sums (K-blocks); bitwise where W_UK is summed in one block (the same dot)."""
    wave = [row for row in _probe_rows(tmp_path, "--one-wave-form", "--shapes", "2:4,17:2") if row["form"] == "one_wave"]
    assert len(wave) == 2 * 13  # WAVE_VARIANTS at each shape
    assert all(row["ok"] for row in wave), [row for row in wave if not row["ok"]]
    assert all(row["bitwise"] for row in wave if row["variant"][2] == 128)


def test_within_one_rounding_allows_reordered_sums_only_as_far_as_their_magnitudes_go():
    """The probe's bound for forms that sum q_abs's 128 products in another order: an entry where they cancel may move
    by 128 fp32 eps of the sum of their magnitudes (more than its own ulp), and an error past that still fails."""
    import importlib
    import sys

    import torch

    sys.path.insert(0, str(REPO / "benchmarks"))
    probe = importlib.import_module("q_prepare_probe")
    heads, nope, rank = 1, 128, 2
    inputs = {"q_nope": torch.ones(1, heads, nope), "w_kv_b": torch.ones(heads * 2 * nope, rank)}
    # the first entry cancels to a tiny sum: magnitudes 128, so 128 * 128 * 2^-23 ~ 2e-3 of reordering is allowed
    expected = torch.tensor([[[1e-6, 4.0, 1.0]]])
    moved = torch.tensor([[[1.5e-3, 4.0, 1.0]]])
    assert probe.within_one_rounding(moved, expected, inputs)["ok"]
    assert not probe.within_one_rounding(moved, expected)["ok"]  # past one ulp of itself without the inputs
    assert not probe.within_one_rounding(torch.tensor([[[3e-3, 4.0, 1.0]]]), expected, inputs)["ok"]
    # the rope columns (past RANK) get one ulp only
    assert not probe.within_one_rounding(torch.tensor([[[1e-6, 4.0, 1.02]]]), expected, inputs)["ok"]
