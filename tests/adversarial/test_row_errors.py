"""A wrong row hidden among many right ones.

A stage's relative L2 error, its largest error against its peak and its cosine are averages or extremes over the
whole stage: a row several times the faithful error, among many exact ones (or among rows of larger norm), moves
none of them past a bf16 tolerance. Every multi-axis stage is therefore judged per row too (each vector along its
last axis: a row, a request's head), against `max_row_rel`, which calibration derives from the faithful
implementations' per-row maximum (ferret/gate/metrics.py, ferret/gate/calibrate.py).

The MLA contracts' rows: a request's appended latent (c_kv), a cache or pool row (kv_cache), and each (request, head)
of the rope, query, scores, probabilities, latent output and output. Their honest and faithful kernels pass with the
rows judged through the gate's own cases (tests/adversarial/test_mla_precision.py, over the frozen cases) and whole
checks (tests/gate/test_discrimination.py, tests/tasks/mla_attention_paged/test_paged_candidates.py).
"""

from __future__ import annotations

import math
import os
import sys
from concurrent.futures import ThreadPoolExecutor
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


@pytest.mark.parametrize("op", ["rmsnorm", "softmax", "rope", "mla_attention", "mla_attention_paged"])
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


# --- wrong rows in the MLA contracts ------------------------------------------------------------------------

MLA_ROW_CHEATS = {
    "u5_mla_tail_request_latent.py": "mla_attention",
    "u5_mla_tail_request_query.py": "mla_attention",
    "u5_mla_paged_page_opening_latent.py": "mla_attention_paged",
}


@pytest.fixture(scope="module")
def mla_verdicts(tmp_path_factory):
    """One CPU check of each MLA row cheat, two at a time (the contiguous ones build and share one gate)."""
    os.environ.setdefault("TRITON_INTERPRET", "1")
    gates = tmp_path_factory.mktemp("mla-row-gates")
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {
            name: pool.submit(check, CONTRACTS / f"{op}.yaml", HERE / "candidates" / name, gates, profile="cpu")
            for name, op in MLA_ROW_CHEATS.items()
        }
        return {name: future.result()[0] for name, future in futures.items()}


def _named(verdict, cheat: str, variant: str, stage: str) -> list[str]:
    """The evidence of each `cheat` detection on `variant` that names `stage` first."""
    return [
        d.evidence
        for d in verdict.detections
        if d.cheat == cheat and d.variant == variant and d.evidence.startswith(f"stage {stage}")
    ]


def _described(verdict) -> list[tuple]:
    return [(d.cheat, d.variant, d.evidence[:160]) for d in verdict.detections]


def test_the_mla_rows_of_one_rounding_are_bounded_under_a_1_5_percent_row():
    """The stages a faithful kernel rounds once (the appended latent, the cache, the rope, the absorbed query, the
    scores against their terms) have row bounds of a few bf16 roundings (0.2% faithful, x margin 4): a request's row
    or a head's 1.5% off, as the candidates below, is past them."""
    contract = load_contract(CONTRACTS / "mla_attention.yaml")
    for stage in ("c_kv", "kv_cache", "q_pe_roped", "k_pe_roped", "q_absorbed", "scores"):
        bound = contract.tolerance("bfloat16", stage).max_row_rel
        assert bound is not None and FLOOR_UNITS * FLOAT32_UNIT_ROUNDOFF < bound < 0.012, (stage, bound)


def test_one_request_written_wrong_to_the_cache_is_named_at_its_row(mla_verdicts):
    """The last request's appended latent 1.55% off: the cache's row bound names it on every case where its
    stage-wide bounds hold (one row of B x L), and c_kv's too with 8 requests; with one or two requests c_kv's own
    relative L2 error is past its bound, a math mismatch."""
    verdict = mla_verdicts["u5_mla_tail_request_latent.py"]
    assert not verdict.passed and not unnamed_rejection(verdict)
    for variant, batch, token in (("long_rows_peaked@bfloat16", 7, 767), ("typical@bfloat16", 1, None)):
        cache = _named(verdict, "wrong_rows", variant, "kv_cache")
        assert cache and f"at batch {batch}, token " in cache[0], _described(verdict)
        assert token is None or f"at batch {batch}, token {token}" in cache[0]
    latent = _named(verdict, "wrong_rows", "long_rows_peaked@bfloat16", "c_kv")
    assert latent and "at batch 7" in latent[0], _described(verdict)
    assert _named(verdict, "math_mismatch", "position_4096@bfloat16", "c_kv"), _described(verdict)


def test_one_head_of_one_request_is_named_at_its_scores(mla_verdicts):
    """Head 0 of the last request with its absorbed query 2^-6 too large: q_absorbed's peak bound sees it (the row
    holds the stage's largest entries), a math mismatch; on the long peaked case its scores are 1% off where the
    scores' stage-wide bounds hold, and their row bound names the request and head (its ragged twin is judged on its
    outputs alone, `traced: false`)."""
    verdict = mla_verdicts["u5_mla_tail_request_query.py"]
    assert not verdict.passed and not unnamed_rejection(verdict)
    assert verdict.first_failing_stage == "q_absorbed"
    assert _named(verdict, "math_mismatch", "long_rows_peaked@bfloat16", "q_absorbed"), _described(verdict)
    scores = _named(verdict, "wrong_rows", "long_rows_peaked@bfloat16", "scores")
    assert scores and "at batch 7, head 0" in scores[0], _described(verdict)


def test_a_paged_row_opening_a_page_is_rejected_by_its_rows_alone(mla_verdicts):
    """A new token that opens a page past the first written 1.2% off: on new_page every stage-wide bound holds (one
    pool row among (B x P + 4) x 64, one appended latent among three), and the row bounds alone reject it, naming
    the pool row (its page, row 0) and the request. The cases that open no page are exact."""
    verdict = mla_verdicts["u5_mla_paged_page_opening_latent.py"]
    assert not verdict.passed and not unnamed_rejection(verdict)
    pool = _named(verdict, "wrong_rows", "new_page@bfloat16", "kv_cache")
    assert pool and pool[0].endswith(", row 0"), _described(verdict)
    assert _named(verdict, "wrong_rows", "new_page@bfloat16", "c_kv"), _described(verdict)
    on_case = {d.cheat for d in verdict.detections if d.variant == "new_page@bfloat16"}
    assert on_case == {"wrong_rows"}, _described(verdict)
    assert not [d for d in verdict.detections if d.variant in ("typical@bfloat16", "reverse_pages@bfloat16")]
