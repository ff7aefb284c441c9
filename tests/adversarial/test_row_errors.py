"""A wrong row hidden among many right ones.

A stage's relative L2 error, its largest error against its peak and its cosine are averages or extremes over the
whole stage: a row several times the faithful error, among many exact ones (or among rows of larger norm), moves
none of them past a bf16 tolerance. Every multi-axis stage is therefore judged per row too (each vector along its
last axis: a row, a request's head), against `max_row_rel`, which calibration derives from the faithful
implementations' per-row maximum (ferret/gate/metrics.py, ferret/gate/calibrate.py).
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from ferret_testkit import CONTRACTS, REPO, unnamed_rejection  # noqa: E402

from ferret.contract.load import load_contract  # noqa: E402
from ferret.contract.model import Stage, Tolerance  # noqa: E402
from ferret.gate.calibrate import FLOAT32_UNIT_ROUNDOFF, FLOOR_UNITS, row_bound  # noqa: E402
from ferret.gate.judge import check  # noqa: E402
from ferret.gate.metrics import ROW_MIN_ENTRIES, compare_stage  # noqa: E402

HERE = Path(__file__).resolve().parent
ROW_CHEATS = {"softmax": "u5_softmax_one_row_in_64.py", "rmsnorm": "u5_rmsnorm_second_tile_rows.py"}
STAGE = Stage(name="y", computes="y", shape=["M", "N"], dims=["row", "col"])


# --- the metric ---------------------------------------------------------------------------------------


def _rows(m: int = 64, n: int = 256, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    scales = torch.logspace(-2, 2, m, dtype=torch.float64)[:, None]
    return torch.randn(m, n, generator=gen, dtype=torch.float64) * scales


def test_one_wrong_row_of_small_norm_passes_every_stage_wide_bound_and_fails_the_row_bound():
    ref = _rows()
    cand = ref.clone()
    cand[3] *= 1.05  # a row of small norm, 5% off
    tol = Tolerance(rel_l2=0.01, max_abs_rel_peak=0.01, cosine_min=0.9999, max_row_rel=0.01)
    m = compare_stage(cand, ref, STAGE, tol)
    assert m.rel_l2 is not None and m.rel_l2 < 1e-4 and m.max_row_rel == pytest.approx(0.05)
    assert not m.passed and m.worst_row == {"row": 3}
    assert len(m.reasons) == 1 and m.reasons[0].startswith("row error") and "row 3" in m.reasons[0]


def test_rows_of_no_error_score_zero_even_at_zero_norm_and_masked_rows_are_not_judged():
    ref = _rows(8, 64)
    ref[2] = 0.0  # an all-zero row, exact in the candidate
    ref[5] = float("nan")  # a row the reference makes NaN: not judged here (the NaN policy judges it)
    m = compare_stage(ref.clone(), ref, STAGE, Tolerance(rel_l2=1e-6, max_row_rel=1e-6))
    assert m.passed and m.max_row_rel == 0.0


def test_a_row_judged_against_its_error_scale_does_not_blow_up_near_zero():
    """A row whose terms cancel (its values near zero) keeps the error of its terms: judged against the stage's
    error scale where the contract declares one, and against scale_floor per entry."""
    ref = torch.full((4, 64), 1e-9, dtype=torch.float64)
    cand = ref + 1e-7  # rounding-sized against terms of size 1
    scale = torch.ones_like(ref)
    tol = Tolerance(rel_l2=1e-3, max_row_rel=1e-3)
    assert compare_stage(cand, ref, STAGE, tol, error_scale=scale).passed
    assert compare_stage(cand, ref, STAGE, tol.model_copy(update={"scale_floor": 1.0})).passed
    assert not compare_stage(cand, ref, STAGE, tol).passed  # against its own norm, the same row is 100x off


def test_rows_shorter_than_the_minimum_are_left_to_the_stage_wide_bounds():
    ref = _rows(4, ROW_MIN_ENTRIES - 1)
    cand = ref.clone()
    cand[0] *= 1.01
    assert compare_stage(cand, ref, STAGE, Tolerance(rel_l2=1.0, max_row_rel=1e-6)).max_row_rel == 0.0
    wide = _rows(4, ROW_MIN_ENTRIES)
    assert compare_stage(wide * 1.01, wide, STAGE, Tolerance(rel_l2=1.0, max_row_rel=1e-6)).max_row_rel == pytest.approx(0.01)


def test_a_one_axis_stage_has_no_rows():
    stage = Stage(name="inv_rms", computes="s", shape=["M"], dims=["row"])
    m = compare_stage(torch.ones(5), torch.ones(5), stage, Tolerance(rel_l2=1e-6, max_row_rel=1e-6))
    assert m.passed and m.max_row_rel is None and m.worst_row is None


def test_the_row_bound_is_floored_at_a_few_float32_units():
    assert row_bound(0.0, 4.0) == float(f"{FLOOR_UNITS * FLOAT32_UNIT_ROUNDOFF:.3g}")
    assert row_bound(0.001, 4.0) == 0.004


# --- the tables ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["rmsnorm", "softmax", "rope"])
def test_every_multi_axis_stage_has_a_row_bound_with_its_provenance(op):
    contract = load_contract(CONTRACTS / f"{op}.yaml")
    table = contract.tolerances
    assert table is not None and "max_row_rel" in table.provenance
    for dtype in contract.dtypes:
        for stage in contract.stages:
            bound = contract.tolerance(dtype, stage.name).max_row_rel
            if len(stage.shape) > 1:
                assert bound is not None and bound >= FLOOR_UNITS * FLOAT32_UNIT_ROUNDOFF * 0.99, (dtype, stage.name)
                assert "max_row_rel" in table.observed[dtype][stage.name], (dtype, stage.name)
            else:
                assert bound is None, (dtype, stage.name)


def test_a_frozen_case_row_without_a_row_bound_takes_the_general_one():
    contract = load_contract(CONTRACTS / "mla_attention.yaml")
    general = contract.tolerance("bfloat16", "o_heads")
    own = contract.tolerance("bfloat16", "o_heads", "long_rows_peaked")
    assert own.max_row_rel == general.max_row_rel
    assert own.rel_l2 is not None and general.rel_l2 is not None and own.rel_l2 <= general.rel_l2


# --- wrong rows in whole checks -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory):
    os.environ.setdefault("TRITON_INTERPRET", "1")
    gates = tmp_path_factory.mktemp("row-gates")
    return {
        op: check(CONTRACTS / f"{op}.yaml", HERE / "candidates" / name, gates, profile="cpu")[0]
        for op, name in ROW_CHEATS.items()
    }


@pytest.mark.parametrize("op", sorted(ROW_CHEATS))
def test_a_kernel_wrong_on_a_few_rows_is_rejected_and_the_row_named(op, verdicts):
    verdict = verdicts[op]
    assert not verdict.passed
    rows = [d for d in verdict.detections if d.cheat == "wrong_rows"]
    assert rows, [(d.cheat, d.evidence[:200]) for d in verdict.detections]
    assert rows[0].catalogue == [30] and "row error" in rows[0].evidence and "row " in rows[0].evidence
    assert not unnamed_rejection(verdict)


def test_the_honest_rmsnorm_passes_with_its_rows_judged(tmp_path):
    """(The honest softmax goes through a whole check in test_amplifying_strata.py.)"""
    os.environ.setdefault("TRITON_INTERPRET", "1")
    honest = REPO / "tasks" / "rmsnorm" / "candidates" / "triton_rmsnorm.py"
    verdict, _ = check(CONTRACTS / "rmsnorm.yaml", honest, tmp_path, profile="cpu")
    assert verdict.passed, [(d.cheat, d.evidence[:200]) for d in verdict.detections]
    judged = [s for r in verdict.variants for s in r.stages if s.max_row_rel is not None]
    assert judged and all(math.isfinite(s.max_row_rel or 0.0) for s in judged)
