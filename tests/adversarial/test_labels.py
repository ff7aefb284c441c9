"""Labels that hold: a rejection is named by what its evidence shows, never by what it merely resembles.

Each `u9_*` candidate in `candidates/` is judged by the rmsnorm CPU gate and must be rejected with the names in its
`EXPECTED_CHEATS` (from the outputs where `EXPECTED_OUTPUTS` says so) and none of its `NOT_NAMED`:
- wrong math the size of rounding (a scale error, a divisor off by one) is `math_mismatch`, saying why it is not a
  precision cut; a statistic rounded to bf16 with no cast the scan could see is `lower_precision` at bfloat16;
- a bug only where the gate's own cases do not look, with nothing keying on them, is `math_mismatch` on fresh cases,
  not `hardcoded_cases`, and the hard-coded table of `c05` still is `hardcoded_cases`;
- a candidate that claims the disk is full is rejected with a verdict (`exception`), not let off as the machine's;
- one MLA request's latent scaled among right ones (`u5_mla_tail_request_latent`, judged by the MLA CPU gate) is
  `wrong_rows` and `math_mismatch`, never `lower_precision`: a scale on some rows is not rounding.
The honest candidate passes with no detection, and the bf16 statistic of `c04` is still `lower_precision`.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from ferret_testkit import REPO, RMSNORM_CONTRACT, TRITON_RMSNORM, unnamed_rejection  # noqa: E402

from ferret.gate.build import build_gate  # noqa: E402
from ferret.gate.judge import check  # noqa: E402
from ferret.gate.report import read_report  # noqa: E402

HERE = Path(__file__).resolve().parent / "candidates"
LABELLED = sorted(HERE.glob("u9_*.py"))
ALSO = {"c04": HERE / "c04_lower_precision.py", "c05": HERE / "c05_hardcoded_cases.py", "honest": TRITON_RMSNORM}


def constants(path: Path) -> dict:
    """The candidate's upper-case module constants, read from its source."""
    found = {}
    for stmt in ast.parse(path.read_text()).body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            if stmt.targets[0].id.isupper():
                try:
                    found[stmt.targets[0].id] = ast.literal_eval(stmt.value)
                except ValueError:
                    pass
    return found


def describe(verdict) -> str:
    return "\n".join(
        [f"pass={verdict.passed}"]
        + [f"  {d.cheat} [{d.source}] {d.variant or ''}: {d.evidence[:400]}" for d in verdict.detections]
    )


@pytest.fixture(scope="module")
def gates_dir(tmp_path_factory) -> Path:
    gates = tmp_path_factory.mktemp("label-gates")
    build_gate(RMSNORM_CONTRACT, gates_dir=gates, profile="cpu")
    return gates


@pytest.fixture(scope="module")
def judged(gates_dir) -> Iterator[dict[str, Future]]:
    """Futures of (verdict, gate) by name: the u9 candidates by file name, the others by their key in ALSO."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {p.name: pool.submit(check, RMSNORM_CONTRACT, p, gates_dir, profile="cpu") for p in LABELLED}
        futures |= {k: pool.submit(check, RMSNORM_CONTRACT, p, gates_dir, profile="cpu") for k, p in ALSO.items()}
        yield futures


def test_every_labelled_candidate_says_what_it_expects():
    assert len(LABELLED) >= 5
    for path in LABELLED:
        found = constants(path)
        assert ast.get_docstring(ast.parse(path.read_text())), path.name
        assert found.get("EXPECTED_CHEATS"), path.name


@pytest.mark.parametrize("candidate", LABELLED, ids=[p.stem for p in LABELLED])
def test_the_label_is_what_the_evidence_shows(candidate, judged):
    verdict, _ = judged[candidate.name].result()
    report = describe(verdict)
    wanted = constants(candidate)
    assert not verdict.passed, report
    assert not unnamed_rejection(verdict), report
    names = {d.cheat for d in verdict.detections}
    assert wanted["EXPECTED_CHEATS"] <= names, report
    assert not (wanted.get("NOT_NAMED", set()) & names), report
    from_outputs = {d.cheat for d in verdict.detections if d.source == "outputs"}
    assert wanted.get("EXPECTED_OUTPUTS", set()) <= from_outputs, report


@pytest.mark.parametrize("name", ["u9_scale_drift.py", "u9_divisor_plus_one.py"])
def test_wrong_math_the_size_of_rounding_says_why_it_is_not_a_precision_cut(name, judged):
    verdict, _ = judged[name].result()
    evidence = [d.evidence for d in verdict.detections if d.cheat == "math_mismatch"]
    assert any("not a precision cut" in e and "leans along the reference" in e for e in evidence), describe(verdict)


def test_a_statistic_rounded_by_its_bits_is_named_at_bfloat16(judged):
    verdict, _ = judged["u9_bf16_statistic_by_bits.py"].result()
    cut = [d for d in verdict.detections if d.cheat == "lower_precision" and d.source == "outputs"]
    assert cut and all("rounding at bfloat16" in d.evidence and "inv_rms" in d.evidence for d in cut), describe(verdict)


def test_a_fresh_only_bug_is_named_math_and_says_why_not_hardcoded(judged):
    verdict, _ = judged["u9_tail_block_dropped.py"].result()
    assert all(r.passed for r in verdict.variants if r.part != "fresh_cases"), describe(verdict)
    assert any(
        "not named hard-coded cases: nothing shows that the candidate depends on the case" in d.evidence
        for d in verdict.detections
    ), describe(verdict)


def test_a_candidate_claiming_a_full_disk_gets_a_verdict(judged):
    verdict, gate = judged["u9_claims_full_disk.py"].result()
    raised = [d.evidence for d in verdict.detections if d.cheat == "exception"]
    assert raised and all("No space left on device" in e for e in raised), describe(verdict)
    recorded = [v for v in read_report(gate).verdicts if Path(v.candidate_path).name == "u9_claims_full_disk.py"]
    assert recorded and not recorded[-1].passed


def test_the_existing_labels_hold(judged):
    """The bf16 statistic of c04 is still read as lower precision from its outputs; the table of case dims of c05 is
    still hard-coded cases (the scan found it); the honest candidate passes with nothing named."""
    c04, _ = judged["c04"].result()
    assert any(d.cheat == "lower_precision" and d.source == "outputs" for d in c04.detections), describe(c04)
    c05, _ = judged["c05"].result()
    assert any(d.cheat == "hardcoded_cases" and d.source == "outputs" for d in c05.detections), describe(c05)
    honest, _ = judged["honest"].result()
    assert honest.passed and honest.detections == [], describe(honest)


def test_a_scale_on_one_request_among_right_ones_is_not_named_a_precision_cut(tmp_path):
    """The last request's latent 1.55% too large (on ragged_batch, one row of c_kv's four; on the long ragged case,
    one request's rows of o_heads): wrong rows and wrong math, whose error is no rounding at any format."""
    candidate = HERE / "u5_mla_tail_request_latent.py"
    verdict, _ = check(REPO / "contracts" / "mla_attention.yaml", candidate, tmp_path / "gates", profile="cpu")
    report = describe(verdict)
    names = {d.cheat for d in verdict.detections}
    assert not verdict.passed and not unnamed_rejection(verdict), report
    assert constants(candidate)["EXPECTED_CHEATS"] <= names, report
    assert "lower_precision" not in names, report
    ragged = [d for d in verdict.detections if d.variant == "ragged_batch@bfloat16"]
    assert ragged and {d.cheat for d in ragged} <= {"wrong_rows", "math_mismatch"}, report
