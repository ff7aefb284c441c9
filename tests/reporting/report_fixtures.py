"""A small gate folder and run folder for the report's tests, made from the typed records alone (no
candidate is run): an honest verdict timed on a GPU, a rejected one with a detection, and a run of two
rounds whose verdicts sit in that gate. Fixed text, seeds and times, so the Markdown is a stable snapshot.

Candidate-controlled text (paths, evidence, kernel names, proposal notes, review text) holds markup and
URLs on purpose: the page must show it as text and load nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from ferret.contract.model import Tolerance
from ferret.dispatch.runlog import CandidateRecord, Established, FinalCheck, RoundRecord, RunLog, StopReason
from ferret.gate.judge import summary
from ferret.gate.metrics import StageMetrics, WorstError
from ferret.gate.models import (
    CaseTiming,
    Detection,
    GateManifest,
    PartResult,
    ProjectLock,
    RooflineWork,
    ServingTiming,
    TimingResult,
    VariantResult,
    Verdict,
)
from ferret.gate.report import append_verdict

GATE_HASH = "ab" * 32
EVIL = '<img src="http://evil.example/pixel.png"><script>fetch("http://evil.example/")</script>'
TOLERANCES = {
    "y": Tolerance(rel_l2=0.01, max_abs_rel_peak=0.02, cosine_min=0.9999),
    "inv_rms": Tolerance(rel_l2=0.001, max_abs_rel_peak=0.002),
}
Status = Literal["pass", "fail", "skipped"]
PARTS_PASS: dict[str, Status] = {
    "correctness": "pass",
    "dtypes": "pass",
    "edge_cases": "pass",
    "fresh_cases": "pass",
    "determinism": "pass",
    "batch_invariance": "skipped",
    "integrity": "pass",
    "stress": "pass",
}


def _stage(name: str, rel_l2: float, passed: bool = True) -> StageMetrics:
    tol = TOLERANCES[name]
    worst = WorstError(index=[3, 17], named={"row": 3, "col": 17}, candidate=1.5, reference=1.0)
    return StageMetrics(
        stage=name,
        passed=passed,
        rel_l2=rel_l2,
        max_abs_rel_peak=rel_l2 * 1.5,
        cosine=1 - rel_l2**2 / 2,
        reasons=[] if passed else [f"rel_l2 {rel_l2:.3e} > {tol.rel_l2:.3e}"],
        worst=None if passed else worst,
        tolerance=tol,
    )


def _variant(case: str, dtype: str, y_error: float, passed: bool = True) -> VariantResult:
    stages = [_stage("inv_rms", 0.0001), _stage("y", y_error, passed)]
    return VariantResult(
        id=f"{case}@{dtype}",
        case=case,
        dtype=dtype,
        part="correctness",
        passed=passed,
        stages=stages,
        first_failing_stage=None if passed else "y",
    )


def _timing() -> TimingResult:
    case = CaseTiming(
        case="hidden_7168",
        candidate_ms=0.0312,
        baseline_ms=0.0950,
        baseline_compiled_ms=0.0410,
        speedup=3.04,
        speedup_vs_compiled=1.31,
        samples={
            "candidate": [0.0310, 0.0312, 0.0315],
            "baseline": [0.0940, 0.0950, 0.0961],
            "compiled": [0.0405, 0.0410, 0.0418],
        },
        floor_ms=0.0187,
        fraction_of_floor=0.599,
        baseline_fraction_of_floor=0.197,
        roofline=RooflineWork(bytes=58720256, flops=0, source="contract"),
        kernels={EVIL: 30.1},
        serving=ServingTiming(
            basis="graph_replay",
            speedup=3.04,
            replay_ms={"candidate": 0.0300, "baseline": 0.0912},
            eager_ms={"candidate": 0.0420, "baseline": 0.1410, "baseline_compiled": 0.0800},
            host_share={"candidate": 0.286, "baseline": 0.394, "baseline_compiled": 0.488},
            # an exception's message is the implementation's text: shown escaped
            not_graph_capturable={"baseline_compiled": f"host_read: RuntimeError: {EVIL}"},
            replay_answers_checked=6,
        ),
    )
    return TimingResult(
        measured=True,
        device="NVIDIA H200",
        method="cuda events",
        cases=[case],
        min_speedup_required=1.5,
        target_met=True,
        geomean_speedup=3.04,
        roofline_source="contract",
        speed_basis="graph_replay",
        serving_measured=True,
    )


def _verdict(path: str, sha: str, passed: bool, seconds: float) -> Verdict:
    failed: dict[str, Status] = {"correctness": "fail", "integrity": "fail", "stress": "skipped"}
    parts: dict[str, Status] = dict(PARTS_PASS) if passed else {**PARTS_PASS, **failed}
    detections = (
        []
        if passed
        else [
            Detection(
                cheat="math_mismatch",
                catalogue=[],
                evidence="y: rel_l2 3.000e-01 > 1.000e-02 at row=3, col=17",
                source="outputs",
                variant="typical@bfloat16",
            ),
            Detection(
                cheat="library_call",
                catalogue=[1],
                evidence=f"torch.nn.functional.rms_norm called: {EVIL}",
                source="static",
                file="candidate.py",
                line=12,
            ),
        ]
    )
    return Verdict(
        passed=passed,
        first_failing_stage=None if passed else "y",
        gate_hash=GATE_HASH,
        op="rmsnorm",
        profile="gpu",
        candidate_path=path,
        candidate_sha256=sha,
        parts={name: PartResult(status=status, detail=f"{name} {status}") for name, status in parts.items()},
        detections=detections,
        variants=[_variant("typical", "bfloat16", 0.004 if passed else 0.3, passed), _variant("typical", "float32", 0.00002)],
        timing=_timing() if passed else TimingResult(measured=False, reason="the candidate is not correct"),
        device="NVIDIA H200",
        versions={"torch": "2.13.0"},
        seeds={"fresh": 7},
        started_at="2026-11-30T12:00:00+00:00",
        seconds=seconds,
    )


HONEST = _verdict("runs/r1/round-01/candidate-0.py", "1" * 64, True, 41.5)
CHEAT = _verdict("runs/r1/round-01/candidate-1.py", "2" * 64, False, 12.25)
SECOND = _verdict("runs/r1/round-02/candidate-0.py", "3" * 64, True, 39.0)
# The final acceptance check of the winner: judged again on fresh cases, whole (its --verdict-out file).
FINAL = HONEST.model_copy(update={"seeds": {"fresh": 8}, "seconds": 44.0})


def _manifest() -> GateManifest:
    return GateManifest(
        op="rmsnorm",
        profile="gpu",
        build_key="k",
        contract={},
        contract_sha256="c",
        platform={},
        versions={},
        judge_sources={},
        project=ProjectLock(root="/project", entry_modules=[], tolerance_file=None, files={}),
        reference={},
        validation={"oracle": "torch.nn.functional.rms_norm", "max_rel_l2": 1e-15},
        variants=[],
        files={},
    )


def make_gate(gates_dir: Path) -> Path:
    """gates/<hash> with a manifest and three verdicts (honest, rejected, honest)."""
    gate = gates_dir / GATE_HASH
    gate.mkdir(parents=True)
    (gate / "manifest.json").write_text(_manifest().model_dump_json(indent=1))
    for verdict in (HONEST, CHEAT, SECOND):
        append_verdict(gate, verdict)
    return gate


def _record(verdict: Verdict, round_number: int, index: int, approach: str, notes: str) -> CandidateRecord:
    from ferret.roles.base import ReviewFinding, ReviewVerdict

    integrity = "pass" if verdict.passed else "fail"
    findings = [] if verdict.passed else [ReviewFinding(file="candidate.py", line=12, message=f"calls the library: {EVIL}")]
    return CandidateRecord(
        round=round_number,
        index=index,
        approach=approach,
        file=verdict.candidate_path,
        sha256=verdict.candidate_sha256,
        notes=notes,
        gate=summary(verdict),
        gate_passed=verdict.passed,
        review=ReviewVerdict(
            integrity=integrity, plan="pass", findings=findings, recommendation=f"review of {approach}", reviewer="llm:scripted"
        ),
        speedup=verdict.timing.geomean_speedup,
        target_met=verdict.timing.target_met,
        speed_measured=verdict.timing.measured,
    )


def make_run(runs_dir: Path) -> Path:
    """runs/r1: two rounds (an honest candidate and a cheat, then a second honest one), the first the winner."""
    folder = runs_dir / "r1"
    folder.mkdir(parents=True)
    first = [
        _record(HONEST, 1, 0, "one row per program", "Load a row, reduce in float32."),
        _record(CHEAT, 1, 1, f"library call {EVIL}", f"Just call the library {EVIL}"),
    ]
    second = [_record(SECOND, 2, 0, "two rows per program", "Amortize the weight load.")]
    log = RunLog(
        run_id="r1",
        op="rmsnorm",
        contract_path="contracts/rmsnorm.yaml",
        contract_sha256="c",
        gate_hash=GATE_HASH,
        profile="gpu",
        optimizer="scripted-optimizer",
        reviewer="llm:scripted",
        status="accepted",
        stop=StopReason.TARGET_MET,
        stop_reason="the speed target was met",
        established=Established(
            correct=True,
            reviewed_by="llm:scripted",
            llm_reviewed=True,
            speed_measured=True,
            target_met=True,
            final_check_passed=True,
        ),
        rounds=[
            RoundRecord(round=1, gate_verified=True, candidates=first),
            RoundRecord(round=2, gate_verified=True, candidates=second, pivot_requested=True),
        ],
        best=first[0],
        final_check=FinalCheck(passed=True, exit_code=0, verdict=summary(FINAL)),
        started_at="2026-11-30T12:00:00+00:00",
        ended_at="2026-11-30T12:05:00+00:00",
    )
    for record in first + second:  # the candidates' files, where the dispatcher keeps them
        file = folder / Path(record.file).parent.name / Path(record.file).name
        file.parent.mkdir(exist_ok=True)
        file.write_text("def run(inputs, outputs, params, trace=None): ...\n")
    (folder / "round-01" / "candidate-0.final-verdict.json").write_text(FINAL.model_dump_json(indent=1))
    log.save(folder)
    return folder
