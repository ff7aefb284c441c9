"""Classing a mutant from its errors, and the audit's independent case set."""

from pathlib import Path

from ferret.audit.classify import classify, honest_spread, plan_independent
from ferret.audit.models import CaseError, StageError
from ferret.contract.task import Task

RMSNORM = Path(__file__).resolve().parents[2] / "contracts" / "rmsnorm.yaml"


def _case(rel_l2: float, passed: bool = True, case: str = "c1", raised: str | None = None) -> CaseError:
    stages = (
        []
        if raised
        else [
            StageError(
                stage="y", passed=passed, rel_l2=rel_l2, max_abs_rel_peak=rel_l2, reasons=[] if passed else ["rel_l2 over"]
            )
        ]
    )
    return CaseError(case=case, dtype="bfloat16", dims={"M": 2}, stages=stages, raised=raised)


HONEST = honest_spread([[_case(1e-3), _case(2e-3, case="c2")]])


def test_harmful_when_over_the_tolerance_on_one_case():
    result = classify([_case(1e-3), _case(0.5, passed=False, case="c2")], HONEST)
    assert result.kind == "harmful" and result.worst is not None and result.worst.case == "c2"
    assert "rel_l2 over" in result.detail


def test_harmful_when_it_raises_on_some_cases_and_stillborn_when_on_all():
    assert classify([_case(1e-3), _case(0, raised="IndexError: x", case="c2")], HONEST).kind == "harmful"
    stillborn = classify([_case(0, raised="TypeError: y"), _case(0, raised="TypeError: y", case="c2")], HONEST)
    assert stillborn.kind == "stillborn" and "TypeError" in stillborn.detail


def test_benign_within_the_honest_spread_and_band_between_it_and_the_tolerance():
    assert classify([_case(2e-3), _case(1e-3, case="c2")], HONEST).kind == "benign"
    band = classify([_case(1e-3), _case(3e-3, case="c2")], HONEST)
    assert band.kind == "band" and band.worst is not None and band.worst.case == "c2"
    assert "1.5" not in band.detail and "3.000e-03" in band.detail


def test_the_independent_set_is_the_audits_own_and_spans_every_stratum():
    task = Task.load(RMSNORM)
    planned = plan_independent(task, "cpu", seed=11, rounds=3)
    gate_seeds = {c.seed for c in task.contract.cases_for("cpu")}
    assert not gate_seeds & {case.seed for case, _, _ in planned}
    covered = {s for _, _, strata in planned for s in strata}
    assert {s.name for s in task.contract.strata("cpu")} <= covered
    assert {dtype for _, dtype, _ in planned} == set(task.contract.dtypes)
    again = plan_independent(task, "cpu", seed=11, rounds=3)
    assert [(c.dims, c.seed) for c, _, _ in again] == [(c.dims, c.seed) for c, _, _ in planned]


def test_by_default_every_stratum_is_held_in_every_dtype():
    """Two rounds once left float32 without a row past 16384 columns: a mutant reading the long-row kernel's weight
    as float16 was benign on that set, though harmful on such a row."""
    task = Task.load(RMSNORM)
    planned = plan_independent(task, "cpu", seed=5)
    held = {(s, dtype) for _, dtype, strata in planned for s in strata}
    assert {(s.name, d) for s in task.contract.strata("cpu") for d in task.contract.dtypes} <= held
