"""The gate discriminates, end to end through `check` on the CPU profile: every task's honest Triton
candidate passes, and each classic MLA simplification fails at its first diverging stage and on the
final output too."""

from __future__ import annotations

from pathlib import Path

import pytest

from ferret.gate.judge import check
from tasks.mla_attention.simplifications import SIMPLIFICATIONS, write_variant

REPO = Path(__file__).resolve().parents[2]
OPS = ["rmsnorm", "softmax", "rope", "mla_attention"]


@pytest.fixture(scope="module")
def gates_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("discrimination-gates")


@pytest.mark.parametrize("op", OPS)
def test_honest_triton_candidate_passes_its_gate(op, gates_dir):
    candidate = sorted((REPO / "tasks" / op / "candidates").glob("triton_*.py"))[0]  # triton_<op>.py sorts first
    verdict, _ = check(REPO / "contracts" / f"{op}.yaml", candidate, gates_dir, profile="cpu")
    failing = {r.id: r.failure.message if r.failure else r.first_failing_stage for r in verdict.variants if not r.passed}
    assert verdict.passed, failing
    assert {p: verdict.parts[p].status for p in ("correctness", "edge_cases", "determinism")} == {
        "correctness": "pass",
        "edge_cases": "pass",
        "determinism": "pass",
    }
    assert not verdict.timing.measured and "no GPU" in verdict.timing.reason


@pytest.mark.parametrize("name", sorted(SIMPLIFICATIONS))
def test_mla_simplification_fails_where_it_diverges_and_on_the_output(name, gates_dir, tmp_path):
    variant = write_variant(name, tmp_path / f"mla_{name}.py")
    verdict, _ = check(REPO / "contracts" / "mla_attention.yaml", variant, gates_dir, profile="cpu")
    assert not verdict.passed
    assert verdict.first_failing_stage == SIMPLIFICATIONS[name].expected_first_stage
    final_failures = [r.id for r in verdict.variants for s in r.stages if s.stage == "o_heads" and not s.passed]
    assert final_failures, "the final output alone must reject the simplification"
    # Named as what it is: a math mismatch at its first stage, with the numbers; never a precision cut
    # (the wrong softmax scale keeps the direction, cosine 0.999, with rel_l2 0.69: far beyond any rounding).
    first = verdict.first_failing_stage
    mismatches = [d.evidence for d in verdict.detections if d.cheat == "math_mismatch"]
    assert any(e.startswith(f"stage {first} differs from the contract's math: rel_l2 ") for e in mismatches), mismatches
    assert "lower_precision" not in {d.cheat for d in verdict.detections}
    # Every stage before the first failing one is within tolerance on every variant: the gate says
    # where the divergence starts, not just that something is wrong.
    order = [s.name for s in __import__("ferret").load_contract(REPO / "contracts/mla_attention.yaml").stages]
    earlier = order[: order.index(verdict.first_failing_stage)]
    assert all(s.passed for r in verdict.variants for s in r.stages if s.stage in earlier)


def test_report_records_the_reference_validation(gates_dir):
    """The gate's report carries the oracle's validation from the build on, before any verdict."""
    from ferret.gate.build import build_gate
    from ferret.gate.report import read_report

    gate = build_gate(REPO / "contracts/mla_attention.yaml", gates_dir, profile="cpu")
    validation = read_report(gate).reference_validation
    assert validation["ran"] is True and validation["passed"] is True
    assert validation["oracle_version"]
    assert validation["max_rel_err_output"] < 1e-4 and validation["max_rel_err_cache"] < 1e-4
    assert abs(validation["scaling"] - 0.1352338) < 1e-6
