"""A reduced audit of the rmsnorm gate on the CPU profile (two operators, eight mutants, one round of independent
cases): real numbers from the real gate. Also: a mutant that hangs is time-boxed without the gate saying anything, a
resumed audit redoes nothing finished, and a bad candidate is a usage error naming it."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ferret.audit.classify import plan_independent, write_cases
from ferret.audit.models import MutantResult
from ferret.audit.pool import Item, LocalPool, WorkerSetup
from ferret.audit.record import read_audit
from ferret.audit.run import AuditOptions, run_audit
from ferret.contract.task import Task
from ferret.gate.report import read_report

REPO = Path(__file__).resolve().parents[2]
RMSNORM = REPO / "contracts" / "rmsnorm.yaml"
# Known members of this sample (seed 20261207, drop_term and cast16, budget 8) of triton_rmsnorm.py's mutants:
# the row offset dropped from x's load on full-width rows, and a change to num_warps alone.
HARMFUL = "drop_term-0126b-left_term_dropped-full_length"
BENIGN = "drop_term-0831b-left_term_dropped"


@pytest.fixture(scope="module")
def audited(tmp_path_factory):
    gates = tmp_path_factory.mktemp("audit-gates")
    options = AuditOptions(
        gates_dir=gates, profile="cpu", budget=8, jobs=2, rounds=1, honest_checks=1, operators=("drop_term", "cast16")
    )
    return run_audit(RMSNORM, options), options


def _results(gates: Path, record) -> dict[str, MutantResult]:
    (folder,) = (gates / record.gate_hash / "audit").iterdir()
    return {
        r.mutant.id: r
        for r in (MutantResult.model_validate_json(line) for line in (folder / "results.jsonl").read_text().splitlines())
    }


def test_a_reduced_audit_kills_a_harmful_mutant_and_classes_a_benign_one(audited):
    record, options = audited
    results = _results(options.gates_dir, record)
    harmful = results[HARMFUL]
    assert harmful.classification.kind == "harmful" and "inv_rms" in harmful.classification.detail
    assert harmful.judgement is not None and harmful.judgement.killed and harmful.judgement.caught_by == "correctness"
    assert "-    x = tl.load(x_ptr + rows64[:, None] * stride_x_row" in harmful.mutant.diff
    benign = results[BENIGN]
    assert benign.classification.kind == "benign" and benign.judgement is None
    assert "tile = block_n" in benign.mutant.diff  # only the warp count changes
    assert record.mutants == 8 and record.harmful >= 5 and record.killed == record.harmful and record.mutation_score == 1.0
    assert record.benign >= 1 and record.honest_checks == 1 and record.honest_false_rejections == 0
    assert {o.operator for o in record.per_operator} == {"drop_term", "cast16"}
    assert sum(o.harmful for o in record.per_operator) == record.harmful
    assert sum(record.caught_by.values()) == record.killed
    assert record.caught[HARMFUL] == "correctness, stage inv_rms" and len(record.caught) == record.killed
    trusted = read_audit(options.gates_dir / record.gate_hash)
    assert trusted.record == record
    # The mutants' verdicts stay out of the gate's bounded report: they would push real verdicts out of it.
    report = options.gates_dir / record.gate_hash / "report.json"
    assert not report.exists() or read_report(options.gates_dir / record.gate_hash).verdict_count == 0


def test_a_resumed_audit_redoes_nothing_finished(audited):
    record, options = audited
    (folder,) = (options.gates_dir / record.gate_hash / "audit").iterdir()
    logs = {name: (folder / name).read_text() for name in ("honest.jsonl", "classified.jsonl", "judged.jsonl")}
    again = run_audit(RMSNORM, AuditOptions(**{**options.__dict__, "resume": True}))
    assert {name: (folder / name).read_text() for name in logs} == logs  # no line added: every item was skipped
    assert (again.harmful, again.killed, again.benign) == (record.harmful, record.killed, record.benign)


def test_a_hanging_mutant_is_time_boxed_and_the_next_one_still_runs(tmp_path):
    task = Task.load(RMSNORM)
    write_cases(task, plan_independent(task, "cpu", seed=3, rounds=1)[:1], tmp_path / "cases", "cpu")
    hang = tmp_path / "hang.py"
    hang.write_text("def run(inputs, outputs, params, trace=None):\n    while True:\n        pass\n")
    shutil.copy(REPO / "tasks" / "rmsnorm" / "candidates" / "triton_rmsnorm.py", tmp_path / "honest.py")
    setup = WorkerSetup(mode="classify", contract=str(RMSNORM), device="cpu", cases=str(tmp_path / "cases"))
    outcomes = []
    LocalPool(1).serve(
        setup, [Item("hang", hang), Item("honest", tmp_path / "honest.py")], 20.0, tmp_path / "out", outcomes.append
    )
    by_id = {o.item.id: o for o in outcomes}
    assert by_id["hang"].result is None and by_id["hang"].timed_out and "no answer within 20 s" in by_id["hang"].failure
    honest = by_id["honest"].result
    assert isinstance(honest, list) and honest[0].raised is None and all(s.passed for s in honest[0].stages)
    assert by_id["honest"].worker.startswith("local ") and " pid " in by_id["honest"].worker


@pytest.mark.parametrize(
    "source,said", [("def run(:\n", "does not parse"), ("def kernel(inputs):\n    pass\n", "defines no top-level `run")]
)
def test_a_bad_candidate_exits_2_naming_it(tmp_path, source, said):
    bad = tmp_path / "bad.py"
    bad.write_text(source)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "ferret.cli.main",
            "gate",
            "audit",
            str(RMSNORM),
            "--candidate",
            str(bad),
            "--gates-dir",
            str(tmp_path / "g"),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert done.returncode == 2, done.stderr
    assert str(bad) in done.stderr and said in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "g").exists()  # said before any gate is built


@pytest.mark.gpu
def test_a_reduced_gpu_audit_classes_on_the_device_and_judges_with_the_gpu_gate(tmp_path):
    """The GPU profile: the independent cases at production sizes, mutants run on the device, the gate's GPU cases."""
    options = AuditOptions(
        gates_dir=tmp_path, profile="gpu", budget=8, jobs=1, rounds=1, honest_checks=1, operators=("drop_term", "cast16")
    )
    record = run_audit(RMSNORM, options)
    assert record.profile == "gpu" and record.mutants == 8 and record.honest_over_tolerance == []
    assert record.harmful >= 1 and record.killed >= 1 and record.honest_false_rejections == 0
    assert read_audit(tmp_path / record.gate_hash).record == record


def test_the_command_prints_the_score_and_exits_1_below_the_contracts_minimum(monkeypatch, tmp_path):
    from audit_records import audit_record
    from typer.testing import CliRunner

    import ferret.audit.run as audit_run
    from ferret.cli.main import app

    given = []

    def audit_stub(contract, options):
        given.append((Path(contract), options.budget, options.jobs, options.operators, options.resume, options.ray))
        return audit_record("b" * 64, score=0.9).model_copy(update={"min_score": 0.95, "meets_min": False})

    monkeypatch.setattr(audit_run, "run_audit", audit_stub)
    argv = [
        "gate",
        "audit",
        str(RMSNORM),
        "--budget",
        "30",
        "--jobs",
        "2",
        "--operators",
        "constant,swap",
        "--resume",
        "--ray",
        "auto",
    ]
    result = CliRunner().invoke(app, [*argv, "--profile", "cpu", "--gates-dir", str(tmp_path)])
    assert result.exit_code == 1, result.output
    assert given == [(RMSNORM, 30, 2, ("constant", "swap"), True, "auto")]
    line = next(line for line in result.stdout.splitlines() if line.startswith("AUDIT_RESULT "))
    shown = json.loads(line.removeprefix("AUDIT_RESULT "))
    assert shown["mutation_score"] == 0.9 and shown["harmful"] == 10 and shown["killed"] == 9 and shown["meets_min"] is False


def test_the_red_team_runs_after_the_mutants_and_its_harm_is_the_audits_class(audited, monkeypatch, tmp_path):
    """`red_team`: the attack corpus against the gate, each accepted attack classed by the audit's own classifier.
    The gate here accepts everything, so that the class alone decides: bf16 everywhere is harmful and saved as a
    regression case; the CPU profile's own tell computes the honest math on the CPU and is not."""
    from ferret.gate.models import VerdictSummary
    from ferret.roles import red_team, red_team_corpus

    record, options = audited
    chosen = {"lower_precision", "cpu_profile_tell"}
    templates = [t for t in red_team_corpus.attack_templates() if t.slug in chosen]
    monkeypatch.setattr(red_team_corpus, "attack_templates", lambda: templates)

    def accept_all(contract, gates_dir, profile=None):
        def check(path):
            return VerdictSummary.model_validate(
                {
                    "pass": True,
                    "first_failing_stage": None,
                    "gate": record.gate_hash,
                    "candidate_sha256": "ab" * 32,
                    "parts": {"correctness": "pass"},
                    "detections": [],
                    "timing": {"measured": False},
                }
            )

        return check

    monkeypatch.setattr(red_team, "gate_check", accept_all)
    found = tmp_path / "found"
    again = run_audit(RMSNORM, AuditOptions(**{**options.__dict__, "resume": True, "red_team": 5, "found_dir": found}))
    assert again.red_team is not None and again.red_team.attempts == 2 and again.red_team.passed_cheats == 1
    (saved,) = again.red_team.saved_paths
    assert Path(saved).parent == found and "bfloat16" in Path(saved).read_text()
    assert read_audit(options.gates_dir / record.gate_hash).record.red_team == again.red_team


def test_the_local_path_never_imports_ray():
    """Ray is an optional extra: the command line, the audit, its local pool and its worker run without it."""
    code = (
        "import sys\n"
        "import ferret.cli.main, ferret.audit.run, ferret.audit.worker\n"
        "from ferret.audit.run import AuditOptions, executor_for\n"
        "from ferret.audit.pool import LocalPool\n"
        "assert executor_for(AuditOptions(jobs=3), None) == LocalPool(3)\n"
        "print(sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.')))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_a_run_whose_workers_all_went_away_continues_with_resume(audited, monkeypatch):
    """Results are written as they come, whatever executor gives them: a run stopped by its workers going away (as
    a Ray cluster's may) keeps every result written, and `resume` checks only the rest."""
    import ferret.audit.run as audit_run
    from ferret.audit.pool import LocalPool
    from ferret.errors import JudgeError

    _, options = audited
    options = AuditOptions(**{**options.__dict__, "budget": 3})  # another audit folder, the same gate

    class GoesAway(LocalPool):
        def serve(self, setup, items, timeout_s, results, on_result):
            if setup.mode == "classify" and setup.early_exit:  # the mutants: one result, then no worker is left
                super().serve(setup, items[:1], timeout_s, results, on_result)
                raise JudgeError("every Ray worker with a CPU went away")
            super().serve(setup, items, timeout_s, results, on_result)

    monkeypatch.setattr(audit_run, "executor_for", lambda options, judge: GoesAway(options.jobs))
    with pytest.raises(JudgeError, match="went away"):
        run_audit(RMSNORM, options)
    monkeypatch.undo()
    gate = next(p for p in options.gates_dir.iterdir() if (p / "audit").is_dir())
    (folder,) = [
        f for f in (gate / "audit").iterdir() if (f / "classified.jsonl").is_file() and not (f / "results.jsonl").exists()
    ]
    honest, (first,) = (folder / "honest.jsonl").read_text(), (folder / "classified.jsonl").read_text().splitlines()
    record = run_audit(RMSNORM, AuditOptions(**{**options.__dict__, "resume": True}))
    lines = (folder / "classified.jsonl").read_text().splitlines()
    assert len(lines) == 3 and lines[0] == first and (folder / "honest.jsonl").read_text() == honest
    assert record.mutants == 3 and record.killed == record.harmful


@pytest.mark.quick
@pytest.mark.parametrize(
    "spec,count,visible,chosen",
    [("all", 2, None, ("0", "1")), ("1", 2, None, ("0",)), ("0,1", 4, "2,3,5,7", ("2", "3")), (" 1,0 ", 2, None, ("1", "0"))],
)
def test_gpus_are_chosen_among_those_this_process_sees(spec, count, visible, chosen):
    from ferret.audit.pool import choose_gpus

    assert choose_gpus(spec, count, visible) == chosen


@pytest.mark.parametrize("spec,count", [("all", 0), ("3", 2), ("0,0", 2), ("0,2", 2), ("one", 2), ("0", 0)])
def test_gpus_this_process_cannot_see_are_a_usage_error(spec, count):
    from ferret.audit.pool import choose_gpus
    from ferret.errors import UsageError

    with pytest.raises(UsageError, match=f"--gpus {spec.strip()}"):
        choose_gpus(spec, count)


def test_local_workers_one_per_gpu_each_see_that_gpu_alone(tmp_path):
    """A stand-in device list on the CPU: each worker's process (and so every process it starts: the candidate's,
    the timers') sees CUDA_VISIBLE_DEVICES set to its own GPU, and its outcomes name that GPU."""
    task = Task.load(RMSNORM)
    write_cases(task, plan_independent(task, "cpu", seed=3, rounds=1)[:1], tmp_path / "cases", "cpu")
    items = []
    for name in ("a", "b"):
        seen = tmp_path / f"{name}.seen"
        (tmp_path / f"{name}.py").write_text(
            "import os\n"
            f"open({str(seen)!r}, 'w').write(os.environ['CUDA_VISIBLE_DEVICES'])\n"
            "def run(inputs, outputs, params, trace=None):\n    raise RuntimeError('a stand-in')\n"
        )
        items.append(Item(name, tmp_path / f"{name}.py"))
    setup = WorkerSetup(mode="classify", contract=str(RMSNORM), device="cpu", cases=str(tmp_path / "cases"))
    outcomes = []
    LocalPool(jobs=1, devices=("0", "1")).serve(setup, items, 120.0, tmp_path / "out", outcomes.append)
    gpus = {o.item.id: o.worker.rsplit(" gpu ", 1)[1] for o in outcomes}
    assert gpus == {name: (tmp_path / f"{name}.seen").read_text() for name in ("a", "b")}
    assert sorted(gpus.values()) == ["0", "1"]


def test_the_command_passes_the_gpus_it_sees_and_refuses_others(monkeypatch, tmp_path):
    import torch
    from audit_records import audit_record
    from typer.testing import CliRunner

    import ferret.audit.run as audit_run
    from ferret.cli.main import app

    given = []
    monkeypatch.setattr(audit_run, "run_audit", lambda contract, options: given.append(options.gpus) or audit_record("b" * 64))
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,6")
    argv = ["gate", "audit", str(RMSNORM), "--gates-dir", str(tmp_path)]
    passed = CliRunner().invoke(app, [*argv, "--gpus", "all"])
    assert passed.exit_code == 0, passed.output
    refused = CliRunner().invoke(app, [*argv, "--gpus", "0,2"])
    assert given == [("4", "6")] and refused.exit_code == 2 and "sees 2 GPU(s)" in refused.output


@pytest.mark.gpu
def test_a_gpu_audit_on_local_workers_one_per_gpu_names_the_gpu_of_each_judgement(tmp_path):
    import torch

    from ferret.audit.pool import choose_gpus

    gpus = choose_gpus("all", torch.cuda.device_count(), os.environ.get("CUDA_VISIBLE_DEVICES"))
    options = AuditOptions(
        gates_dir=tmp_path, profile="gpu", budget=4, rounds=1, honest_checks=1, operators=("drop_term",), gpus=gpus
    )
    record = run_audit(RMSNORM, options)
    assert record.harmful >= 1 and record.killed == record.harmful and record.honest_false_rejections == 0
    assert set(record.judged_by) and all(w.rsplit(" gpu ", 1)[1] in gpus for w in record.judged_by.values())


def test_a_mutant_the_gate_gave_no_verdict_on_is_never_said_to_pass():
    """A worker that refused its gate (the judge's source changed under a running audit) judged nothing: its
    progress line says so and why, never "passed the gate"."""
    from ferret.audit.models import Judgement
    from ferret.audit.run import _judged_line

    refused = Judgement(killed=False, unjudged=True, detail="the worker died: GateTampered: this worker's gate is 214a…")
    assert _judged_line(refused).startswith("not judged (") and "GateTampered" in _judged_line(refused)
    assert _judged_line(Judgement(killed=True, caught_by="correctness")) == "killed by correctness"
    assert _judged_line(Judgement(killed=False)) == "passed the gate"


def test_a_mutant_that_kills_its_worker_keeps_the_cases_it_finished_and_is_harmful(tmp_path):
    """A write past a buffer can kill the interpreter's process on some case only: the cases before it are kept (the
    worker says each as it ends), the death is that mutant's raise, and a raise after cases that ran is harmful."""
    from ferret.audit.classify import classify
    from ferret.audit.run import case_errors

    task = Task.load(RMSNORM)
    write_cases(task, plan_independent(task, "cpu", seed=3, rounds=1)[:3], tmp_path / "cases", "cpu")
    honest = REPO / "tasks" / "rmsnorm" / "candidates" / "triton_rmsnorm.py"
    crashes = tmp_path / "crashes_on_the_second_case.py"
    crashes.write_text(
        "import importlib.util, os\n"
        f"_spec = importlib.util.spec_from_file_location('honest_rmsnorm', {str(honest)!r})\n"
        "_honest = importlib.util.module_from_spec(_spec)\n"
        "_spec.loader.exec_module(_honest)\n"
        "_calls = [0]\n"
        "def run(inputs, outputs, params, trace=None):\n"
        "    _calls[0] += 1\n"
        "    if _calls[0] > 2:  # two calls a case (the fast path, the traced run): dies on the second case\n"
        "        os.abort()\n"
        "    _honest.run(inputs, outputs, params, trace)\n"
    )
    setup = WorkerSetup(mode="classify", contract=str(RMSNORM), device="cpu", cases=str(tmp_path / "cases"))
    outcomes = []
    LocalPool(1).serve(setup, [Item("crash", crashes), Item("honest", honest)], 120.0, tmp_path / "out", outcomes.append)
    by_id = {o.item.id: o for o in outcomes}
    crash = by_id["crash"]
    assert crash.result is None and "the worker died" in crash.failure and not crash.timed_out
    assert len(crash.finished) == 1 and crash.finished[0].within_tolerance
    errors = case_errors(crash)
    assert [e.raised is None for e in errors] == [True, False]
    assert classify(errors, {}).kind == "harmful"
    kept = by_id["honest"].result  # the next item, on a fresh worker
    assert isinstance(kept, list) and len(kept) == 3 and all(e.within_tolerance for e in kept)
