"""The loop's stop rules and bookkeeping, with scripted roles (test doubles of the optimizer and the
reviewer) and the real gate on the rmsnorm CPU profile."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Literal

import pytest

import ferret.dispatch.dispatcher as dispatcher_module
from ferret.dispatch import Dispatcher
from ferret.dispatch.runlog import RunLog
from ferret.roles.base import OptimizerContext, Proposal, ReviewVerdict
from ferret.roles.review import StaticReviewer

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "fixtures"))
from ferret_testkit import write_contract  # noqa: E402

CONTRACT = REPO / "contracts" / "rmsnorm.yaml"
HONEST = (REPO / "tasks" / "rmsnorm" / "candidates" / "triton_rmsnorm.py").read_text()
WRONG = (
    HONEST.replace("\ndef run(", "\ndef _honest_run(")
    + """

def run(inputs, outputs, params, trace=None):
    _honest_run(inputs, outputs, params, trace)
    outputs["y"].mul_(1.5)
"""
)


class ScriptedOptimizer:
    """Proposes what each round's entry says; an exception entry is raised; records every context."""

    name = "scripted-optimizer"

    def __init__(self, rounds):
        self.rounds: list[Any] = list(rounds)
        self.contexts = []

    def propose(self, context: OptimizerContext) -> list[Proposal]:
        self.contexts.append(context)
        step: Any = self.rounds.pop(0) if self.rounds else []
        if isinstance(step, BaseException):
            raise step
        if isinstance(step, list):
            return step
        return step(context)


class ScriptedReviewer:
    def __init__(self, integrity: Literal["pass", "fail"] = "pass", name="llm:scripted"):
        self.integrity: Literal["pass", "fail"] = integrity
        self.name = name
        self.contexts = []

    def review(self, context):
        self.contexts.append(context)
        return ReviewVerdict(integrity=self.integrity, plan="pass", recommendation="scripted", reviewer=self.name)


@pytest.fixture
def dirs(tmp_path_factory):
    shared = tmp_path_factory.getbasetemp() / "dispatch-gates"
    shared.mkdir(exist_ok=True)
    return shared, tmp_path_factory.mktemp("runs")


def _dispatch(dirs, optimizer, reviewer=None, **kwargs):
    gates, runs = dirs
    return Dispatcher(
        CONTRACT,
        optimizer=optimizer,
        reviewer=reviewer or StaticReviewer(),
        gates_dir=gates,
        runs_dir=runs,
        profile="cpu",
        **kwargs,
    )


def test_correct_on_the_cpu_is_reported_as_speed_not_measured(dirs):
    optimizer = ScriptedOptimizer([[Proposal(source=HONEST, approach="honest")], []])
    lines = []
    log = _dispatch(dirs, optimizer, progress=lines.append).run()
    assert log.status == "correct_speed_not_measured"
    # The final check's own progress is passed on as it comes, not held until it ends.
    final = [line for line in lines if line.startswith("final check | ")]
    assert any("typical@bfloat16: ok" in line for line in final) and any("PASS" in line for line in final), lines
    # It says why a search stops after its first correct candidate here: there is nothing to rank by.
    assert log.stop_reason == (
        "the optimizer has nothing more to try (no GPU: speed is not measured, so the search "
        "has nothing to rank correct candidates by)"
    )
    assert log.established.correct and not log.established.speed_measured and not log.established.llm_reviewed
    assert log.established.final_check_passed is True and log.final_check.passed is True
    assert log.best.approach == "honest" and Path(log.best.file).read_text() == HONEST
    saved = RunLog.model_validate(json.loads((Path(log.best.file).parents[1] / "run.json").read_text()))
    assert saved.status == log.status and len(saved.rounds) == 2 - 1


def test_the_optimizer_is_told_the_languages_the_cpu_profile_can_judge(tmp_path):
    """A contract allowing CUDA beside Triton, dispatched on the CPU profile: the optimizer hears Triton only (a CUDA
    candidate runs on a GPU alone), so the template search never proposes a CUDA point there."""
    contract = write_contract(tmp_path, lambda d: d["backend"].update(allowed_languages=["cuda"]), link_tasks=True)
    optimizer = ScriptedOptimizer([[]])
    # its own gates folder: the shared one holds the rmsnorm contract's gate alone, which the tampering test edits
    log = Dispatcher(
        contract,
        optimizer=optimizer,
        reviewer=StaticReviewer(),
        gates_dir=tmp_path / "gates",
        runs_dir=tmp_path / "runs",
        profile="cpu",
    ).run()
    assert log.status == "rejected" and optimizer.contexts[0].languages == ["triton"]  # nothing proposed, nothing passed


def test_max_rounds_without_a_passing_candidate_is_incomplete_and_feedback_reaches_the_optimizer(dirs):
    optimizer = ScriptedOptimizer([[Proposal(source=WRONG, approach=f"wrong-{i}")] for i in range(3)])
    log = _dispatch(dirs, optimizer, max_rounds=3).run()
    assert log.status == "incomplete" and "maximum of 3 rounds" in log.stop_reason
    assert log.best is None
    # Round 2 saw round 1's gate feedback: the failing stage and its metrics, never a golden value.
    feedback = optimizer.contexts[1].history[0]
    assert not feedback.passed and feedback.first_failing_stage == "y"
    assert any("stage y: rel_l2" in f for f in feedback.failures)
    # No progress for two rounds: the third round is asked to pivot.
    assert [c.must_pivot for c in optimizer.contexts] == [False, False, True]
    assert optimizer.contexts[2].tried_approaches == ["wrong-0", "wrong-1"]


def test_an_integrity_failure_rejects_a_round_whatever_the_gate_said(dirs):
    optimizer = ScriptedOptimizer([[Proposal(source=HONEST, approach="honest")], []])
    log = _dispatch(dirs, optimizer, reviewer=ScriptedReviewer(integrity="fail")).run()
    assert log.rounds[0].candidates[0].gate_passed
    assert log.best is None and log.status == "rejected"


def _locked_golden(gates: Path) -> Path:
    """A golden file the gate's lock covers (an audit's own cases lie beside the gate, outside its lock)."""
    return next(p for p in sorted(gates.rglob("golden.safetensors")) if "audit" not in p.relative_to(gates).parts)


def test_tampering_with_the_gate_between_rounds_aborts_the_run(dirs):
    gates, _ = dirs

    def tamper(context):
        golden = _locked_golden(gates)
        golden.chmod(0o600)
        data = bytearray(golden.read_bytes())
        data[-1] ^= 1
        golden.write_bytes(bytes(data))
        return [Proposal(source=WRONG, approach="after tampering")]

    optimizer = ScriptedOptimizer([[Proposal(source=WRONG, approach="first")], tamper, []])
    log = _dispatch(dirs, optimizer, max_rounds=4).run()
    assert log.status == "incomplete" and "gate tampered" in log.stop_reason
    assert len(log.rounds) == 1  # the tampering round was never judged
    # Put the byte back for the other tests that share the gate.
    golden = _locked_golden(gates)
    data = bytearray(golden.read_bytes())
    data[-1] ^= 1
    golden.write_bytes(bytes(data))


def test_an_interrupted_run_is_incomplete_and_can_be_resumed(dirs):
    optimizer = ScriptedOptimizer([[Proposal(source=WRONG, approach="first")], KeyboardInterrupt()])
    log = _dispatch(dirs, optimizer, max_rounds=4).run()
    folder = Path(log.rounds[0].candidates[0].file).parents[1]
    assert log.status == "incomplete"
    assert log.stop_reason == f"interrupted by SIGINT (resume with `ferret dispatch --resume {folder}`)"
    # Resumed from the run folder alone: the contract and the profile come from its log.
    gates, _ = dirs
    resumed_optimizer = ScriptedOptimizer([[Proposal(source=HONEST, approach="honest")], []])
    dispatcher = Dispatcher.resuming(
        folder, optimizer=resumed_optimizer, reviewer=StaticReviewer(), gates_dir=gates, max_rounds=4
    )
    assert dispatcher.contract_path == CONTRACT and dispatcher.profile == "cpu"
    resumed = dispatcher.run()
    assert resumed.run_id == log.run_id
    assert [r.round for r in resumed.rounds] == [1, 2]
    assert resumed_optimizer.contexts[0].round == 2 and resumed_optimizer.contexts[0].history[0].approach == "first"
    assert resumed.status == "correct_speed_not_measured"


def test_a_final_check_that_ends_without_a_verdict_leaves_the_run_incomplete_and_resuming_runs_it_again(dirs, monkeypatch):
    """The judge's own failure in the final check (out of memory on an H100, the dispatcher's process holding the
    card) says nothing of the candidate: the run is not rejected; it keeps the judge's last words and
    the command that runs the check again, and resuming the finished run runs only the final check."""
    mistake = "ferret: internal error: OutOfMemoryError: CUDA out of memory. Tried to allocate 2.25 GiB."

    def judge_crashes(command, **kwargs):  # `ferret check` ends with the judge's mistake line, writing no verdict
        kwargs["on_stderr_line"]("Traceback (most recent call last):")
        return subprocess.CompletedProcess(
            command, 4, "", "Traceback (most recent call last):\n" + "x" * 2000 + "\n" + mistake + "\n"
        )

    monkeypatch.setattr(dispatcher_module, "run_child", judge_crashes)
    optimizer = ScriptedOptimizer([[Proposal(source=HONEST, approach="honest")]])
    log = _dispatch(dirs, optimizer, max_rounds=1).run()
    folder = Path(log.best.file).parents[1]
    assert log.status == "incomplete" and log.stop.value == "max_rounds"
    assert log.stop_reason == (
        f"reached the maximum of 1 rounds; the final acceptance check ended without a verdict "
        f"(exit 4): run it again with `ferret dispatch --resume {folder}`"
    )
    assert log.final_check.exit_code == 4 and log.final_check.verdict is None
    assert log.final_check.error == f"no verdict (FileNotFoundError): {mistake}"  # whole, past the traceback
    assert log.established.correct and log.established.final_check_passed is None
    monkeypatch.undo()
    gates, _ = dirs
    resumed_optimizer = ScriptedOptimizer([])
    resumed = Dispatcher.resuming(
        folder, optimizer=resumed_optimizer, reviewer=StaticReviewer(), gates_dir=gates, max_rounds=1
    ).run()
    assert resumed_optimizer.contexts == [] and len(resumed.rounds) == 1  # no round: the final check alone
    assert resumed.final_check.passed is True and resumed.status == "correct_speed_not_measured"


def _finished_run_moved(dirs, tmp_path) -> tuple[RunLog, Path]:
    """A finished run (one round, its honest best passed the final check) packed and unpacked elsewhere, as a run
    resumed on another machine is: its log still names the folder the rounds ran in."""
    import shutil

    log = _dispatch(dirs, ScriptedOptimizer([[Proposal(source=HONEST, approach="honest")]]), max_rounds=1).run()
    old = Path(log.best.file).parents[1]
    moved = tmp_path / "elsewhere" / old.name
    shutil.copytree(old, moved)
    shutil.rmtree(old)
    return log, moved


def _resume_for_one_more_round(dirs, folder: Path) -> RunLog:
    gates, _ = dirs
    return Dispatcher.resuming(
        folder, optimizer=ScriptedOptimizer([[]]), reviewer=StaticReviewer(), gates_dir=gates, max_rounds=2
    ).run()


def test_a_moved_run_resumed_checks_its_best_from_the_run_folder_it_is_in_now(dirs, tmp_path):
    """A run resumed on another machine must not look for the best at the path the log named (the folder the rounds
    ran in, which is not there): the final check judges the run folder's own copy."""
    log, moved = _finished_run_moved(dirs, tmp_path)
    assert not Path(log.best.file).exists()
    resumed = _resume_for_one_more_round(dirs, moved)
    assert resumed.best.file == log.best.file and resumed.final_check.passed is True
    assert resumed.status == "correct_speed_not_measured"


@pytest.mark.parametrize("damage", ["edited", "missing"])
def test_a_best_candidate_changed_or_missing_since_its_round_gets_no_final_check(dirs, tmp_path, damage):
    """The final check vouches for the bytes the rounds judged: a best candidate whose file changed since (its sha256
    is not the logged one) or is gone is not checked; the run stays incomplete and says which file and why."""
    log, moved = _finished_run_moved(dirs, tmp_path)
    best = moved / "round-01" / "candidate-1.py"
    if damage == "edited":
        best.write_text(WRONG)
    else:
        best.unlink()
    resumed = _resume_for_one_more_round(dirs, moved)
    why = (
        f"{best}: its sha256 is not the one round 1 judged ({log.best.sha256[:12]}…): the file changed since, and "
        "the final check judges only what the rounds judged"
        if damage == "edited"
        else f"{best}: no such candidate file (round 1's candidate 1 is not in the run folder)"
    )
    assert resumed.final_check.error == why and resumed.final_check.exit_code is None
    assert not resumed.final_check.passed and resumed.final_check.verdict is None
    assert resumed.status == "incomplete" and resumed.stop_reason.endswith(f"; no final acceptance check: {why}")
    assert resumed.established.final_check_passed is None


def test_a_run_resumed_under_another_gate_says_so_and_keeps_the_gate_of_its_earlier_rounds(dirs):
    """A run resumed after a change to the judge's code, which the gate's lock covers: the gate was
    built again under another hash. The log keeps the gate the earlier rounds were judged under, and the run says so."""
    optimizer = ScriptedOptimizer([[Proposal(source=WRONG, approach="first")], KeyboardInterrupt()])
    log = _dispatch(dirs, optimizer, max_rounds=2).run()
    folder = Path(log.rounds[0].candidates[0].file).parents[1]
    current = log.gate_hash
    assert log.earlier_gates == [] and log.rounds[0].candidates[0].gate.gate == current
    older = "0" * 64  # the gate of a judge before a change
    (folder / "run.json").write_text(log.model_copy(update={"gate_hash": older}).model_dump_json(by_alias=True))
    gates, _ = dirs
    lines = []
    resumed = Dispatcher.resuming(
        folder,
        optimizer=ScriptedOptimizer([[Proposal(source=HONEST, approach="honest")]]),
        reviewer=StaticReviewer(),
        gates_dir=gates,
        max_rounds=2,
        progress=lines.append,
    ).run()
    assert resumed.gate_hash == current and resumed.earlier_gates == [older]
    assert f"the gate is {current[:12]} now, {older[:12]} in the rounds before" in "\n".join(lines), lines
    assert RunLog.model_validate_json((folder / "run.json").read_text()).earlier_gates == [older]


@pytest.mark.quick
def test_an_error_is_incomplete_never_success(dirs):
    optimizer = ScriptedOptimizer([RuntimeError("optimizer broke")])
    log = _dispatch(dirs, optimizer).run()
    assert log.status == "incomplete" and "optimizer broke" in log.stop_reason


def test_accepted_needs_gate_review_and_speed_target(dirs, monkeypatch):
    """On a GPU the judge measures speed; here the judge's timing result is replaced (only the timing:
    correctness is judged for real) to exercise the accept rule of the loop."""
    from ferret.gate.models import TimingResult

    real_check = dispatcher_module.Judge.check

    def check_with_speed(self, *args, **kwargs):
        verdict = real_check(self, *args, **kwargs)
        timing = TimingResult(measured=True, min_speedup_required=1.5, target_met=True, geomean_speedup=2.0)
        return verdict.model_copy(update={"timing": timing})

    monkeypatch.setattr(dispatcher_module.Judge, "check", check_with_speed)
    optimizer = ScriptedOptimizer(
        [[Proposal(source=HONEST, approach="honest")], [Proposal(source=WRONG, approach="never asked")]]
    )
    log = _dispatch(dirs, optimizer, reviewer=ScriptedReviewer()).run()
    assert log.status == "accepted"
    assert log.stop_reason.startswith("a candidate passed the gate and the review, and met the speed target")
    assert len(log.rounds) == 1 and log.established.llm_reviewed and log.established.target_met


def test_llm_roles_through_a_scripted_model(dirs):
    """The LLM optimizer and reviewer, driven by the scripted test model shipped in ferret.models.testing:
    the optimizer's prompt carries the contract and the last round's feedback with its tolerance; the
    reviewer's verdict is recorded; the status says an LLM reviewed it."""
    from ferret.models.testing import ScriptedModel, tool_call_response
    from ferret.roles.llm_optimizer import LLMOptimizer
    from ferret.roles.review import LLMReviewer

    agents = REPO / "agents"
    optimizer_model = ScriptedModel(
        [
            tool_call_response("submit_candidate", source=WRONG, approach="scaled", notes="first try"),
            tool_call_response("submit_candidate", source=HONEST, approach="honest", notes="fixed the scale"),
        ]
    )
    reviewer_model = ScriptedModel(
        [
            tool_call_response("submit_review", integrity="pass", plan="pass", findings=[], recommendation="fine"),
            tool_call_response("submit_review", integrity="pass", plan="pass", findings=[], recommendation="fine"),
        ]
    )
    log = _dispatch(dirs, LLMOptimizer(optimizer_model, agents), reviewer=LLMReviewer(reviewer_model, agents), max_rounds=2).run()
    assert log.optimizer == "llm:scripted" and log.reviewer == "llm:scripted"
    second_prompt = optimizer_model.requests[1].messages[0].content
    assert "op: rmsnorm" in second_prompt and "stage y" in second_prompt and "tolerance" in second_prompt
    assert "golden.safetensors" not in second_prompt and "manifest.json" not in second_prompt
    assert optimizer_model.requests[0].tools[0].name == "submit_candidate"
    assert log.best.approach == "honest" and log.best.review.reviewer == "llm:scripted"
    # No GPU here: correct and reviewed by an LLM, but speed not measured.
    assert log.status == "correct_speed_not_measured" and log.established.llm_reviewed


def test_rounds_judge_at_most_proposals_per_round_quickly_and_the_final_check_runs_everything(dirs, monkeypatch):
    real_check = dispatcher_module.Judge.check
    calls = []

    def recording_check(self, *args, **kwargs):
        calls.append(kwargs)
        return real_check(self, *args, **kwargs)

    monkeypatch.setattr(dispatcher_module.Judge, "check", recording_check)
    three = [Proposal(source=WRONG, approach=f"wrong-{i}") for i in range(3)]
    optimizer = ScriptedOptimizer([three, [Proposal(source=HONEST, approach="honest")], []])
    log = _dispatch(dirs, optimizer, proposals_per_round=2).run()
    assert [c.approach for c in log.rounds[0].candidates] == ["wrong-0", "wrong-1"]
    assert len(calls) == 3 and all(c["run_stress"] is False and c["compare_compiled"] is False for c in calls)
    assert log.rounds[1].candidates[0].gate.parts["stress"] == "skipped"
    # The final acceptance check is `ferret check` in a fresh process: stress and every comparison.
    assert log.status == "correct_speed_not_measured" and log.final_check.passed is True
    assert log.final_check.verdict.parts["stress"] == "skipped"  # the CPU profile has no stress part
    assert log.final_check.verdict.timing.measured is False and "no GPU" in log.final_check.verdict.timing.reason


def test_round_limits_come_from_the_contract_and_must_be_positive(dirs):
    optimizer = ScriptedOptimizer([])
    dispatcher = _dispatch(dirs, optimizer)
    assert dispatcher.proposals_per_round == dispatcher.contract.budgets.proposals_per_round == 4
    assert dispatcher.max_rounds == dispatcher.contract.budgets.max_rounds
    with pytest.raises(ValueError, match="at least 1"):
        _dispatch(dirs, optimizer, proposals_per_round=-1)


def test_the_test_writer_adviser_adds_cases_the_gate_is_built_with(dirs):
    """A scripted LLM adviser proposes one good CPU case and one that names an unknown input: the good one
    is drawn and computed by the reference into the run's gate, the other is refused with its reason, and
    the honest candidate is judged on both the contract's cases and the new one."""
    from ferret.models.testing import ScriptedModel, tool_call_response
    from ferret.roles.test_writer import LLMTestWriter

    gates, runs = dirs
    good = {
        "profile": "cpu",
        "name": "past_power_of_two",
        "kind": "edge",
        "dims": {"M": 3, "N": 1025},
        "seed": 11,
        "description": "one column past a power of two",
    }
    bad = {**good, "name": "unknown_input", "edits": [{"input": "bias", "set": "zeros_rows", "rows": [0]}]}
    model = ScriptedModel([tool_call_response("submit_cases", cases=[good, bad], stage_checks=[], notes="two cases")])
    optimizer = ScriptedOptimizer([[Proposal(source=HONEST, approach="honest")], []])
    log = Dispatcher(
        CONTRACT,
        optimizer=optimizer,
        reviewer=StaticReviewer(),
        gates_dir=gates,
        runs_dir=runs,
        profile="cpu",
        test_writer=LLMTestWriter(model, REPO / "agents"),
    ).run()
    assert log.test_writer == "llm:scripted" and log.extra_cases == ["cpu:past_power_of_two"]
    assert len(log.rejected_cases) == 1 and "no input named 'bias'" in log.rejected_cases[0]
    assert log.gate_contract_path is not None
    gate_contract = Path(log.gate_contract_path)
    assert gate_contract.parent == Path(log.best.file).parents[1]  # runs/<id>/gate-contract.yaml
    manifest = json.loads((gates / log.gate_hash / "manifest.json").read_text())
    assert "past_power_of_two" in {v["case"] for v in manifest["variants"]}
    judged = log.rounds[0].candidates[0].gate.cases
    assert any(name.startswith("past_power_of_two@") for name in judged) and any(name.startswith("typical@") for name in judged)
    assert log.status == "correct_speed_not_measured" and log.final_check.passed is True
    # The optimizer read the contract as the user wrote it, not the derived one.
    assert optimizer.contexts[0].contract_yaml == CONTRACT.read_text()


def test_without_a_model_the_gate_holds_the_contract_cases_and_the_log_says_so(dirs):
    optimizer = ScriptedOptimizer([[Proposal(source=HONEST, approach="honest")], []])
    log = _dispatch(dirs, optimizer).run()
    assert log.test_writer == "contract-cases" and log.extra_cases == [] and log.gate_contract_path is None
    assert "contract's own cases only" in log.test_writer_note


def test_a_resumed_run_keeps_the_gate_contract_with_the_advised_cases(dirs):
    from ferret.models.testing import ScriptedModel, tool_call_response
    from ferret.roles.test_writer import LLMTestWriter

    gates, runs = dirs
    good = {
        "profile": "cpu",
        "name": "seventeen_rows",
        "kind": "edge",
        "dims": {"M": 17, "N": 33},
        "seed": 12,
        "description": "rows not a multiple of any row block",
    }
    model = ScriptedModel([tool_call_response("submit_cases", cases=[good], stage_checks=[], notes="")])
    first = ScriptedOptimizer([[Proposal(source=WRONG, approach="first")], KeyboardInterrupt()])
    log = Dispatcher(
        CONTRACT,
        optimizer=first,
        reviewer=StaticReviewer(),
        gates_dir=gates,
        runs_dir=runs,
        profile="cpu",
        test_writer=LLMTestWriter(model, REPO / "agents"),
        max_rounds=3,
    ).run()
    assert log.status == "incomplete" and log.extra_cases == ["cpu:seventeen_rows"]
    assert log.gate_contract_path is not None
    folder = Path(log.gate_contract_path).parent
    # Resumed with no adviser at all: the run's gate contract still holds the advised case.
    resumed_optimizer = ScriptedOptimizer([[Proposal(source=HONEST, approach="honest")], []])
    resumed = _dispatch(dirs, resumed_optimizer, max_rounds=3).run(resume=folder)
    assert resumed.gate_hash == log.gate_hash and resumed.extra_cases == ["cpu:seventeen_rows"]
    assert any(name.startswith("seventeen_rows@") for name in resumed.rounds[1].candidates[0].gate.cases)
    assert resumed.status == "correct_speed_not_measured"


def test_a_failing_llm_reviewer_leaves_the_static_review_and_the_run_goes_on(dirs):
    """The reviewer's model answers without its tool call (a model error after the SDK's retries): the
    candidate keeps the static scan's review, which says why, and a static review is not an LLM review."""
    from ferret.models.testing import ScriptedModel
    from ferret.roles.review import LLMReviewer

    reviewer = LLMReviewer(ScriptedModel(["I would rather not call the tool."]), REPO / "agents")
    optimizer = ScriptedOptimizer([[Proposal(source=HONEST, approach="honest")], []])
    log = _dispatch(dirs, optimizer, reviewer=reviewer).run()
    review = log.rounds[0].candidates[0].review
    assert review.reviewer == "static-scan" and review.integrity == "pass"
    assert review.recommendation.startswith(
        "the LLM reviewer failed (ModelError: scripted answered without calling submit_review"
    )
    assert log.status == "correct_speed_not_measured" and not log.established.llm_reviewed


def test_resume_mistakes_are_usage_errors_that_leave_the_run_alone(dirs, tmp_path):
    """Each mistake names the run folder and what is wrong, before anything of the run is touched."""
    import shutil

    from ferret.errors import UsageError
    from ferret.roles.test_writer import ContractCasesOnly

    gates, runs = dirs
    log = _dispatch(dirs, ScriptedOptimizer([KeyboardInterrupt()])).run()  # interrupted before round 1: no judging
    folder = runs / log.run_id
    before = (folder / "run.json").read_bytes()
    roles = {
        "optimizer": ScriptedOptimizer([]),
        "reviewer": StaticReviewer(),
        "test_writer": ContractCasesOnly(),
        "gates_dir": gates,
    }

    with pytest.raises(UsageError, match=re.escape(f"{tmp_path} is not a run folder (no run.json)")):
        Dispatcher.resuming(tmp_path, **roles)
    other = write_contract(tmp_path, lambda d: d["budgets"].update(max_rounds=9), name="other.yaml", link_tasks=True)
    different = re.escape(
        f"{folder} was started with {CONTRACT} (sha256 {log.contract_sha256[:12]}…); {other} is a different contract"
    )
    with pytest.raises(UsageError, match=different):
        Dispatcher.resuming(folder, contract=other, **roles)
    with pytest.raises(UsageError, match=different):
        Dispatcher(other, profile="cpu", **roles).run(resume=folder)
    with pytest.raises(UsageError, match=re.escape(f"{folder} runs with profile cpu, not gpu")):
        Dispatcher.resuming(folder, profile="gpu", **roles)
    assert (folder / "run.json").read_bytes() == before

    # The run's own contract file changed since it started (a copy, named in a copy of the run).
    copy = Path(shutil.copytree(folder, tmp_path / "runs" / folder.name))
    moved = other.parent / "moved.yaml"  # beside the tolerance table the contract names
    shutil.copy(CONTRACT, moved)
    data = json.loads((copy / "run.json").read_text())
    (copy / "run.json").write_text(json.dumps({**data, "contract_path": str(moved)}))
    assert Dispatcher.resuming(copy, **roles).contract_path == moved  # unchanged: fine
    moved.write_text(moved.read_text() + "# edited\n")
    with pytest.raises(UsageError, match=re.escape(f"{copy} was started with {moved} (sha256") + ".*which has changed since"):
        Dispatcher.resuming(copy, **roles)
    moved.unlink()
    with pytest.raises(UsageError, match=re.escape(f"{copy} was started with {moved} (sha256") + ".*not there any more"):
        Dispatcher.resuming(copy, **roles)


def test_a_run_timed_on_one_device_is_not_resumed_on_another(dirs):
    """The device pool lends an H100 or an H200: a run whose round was timed on one is refused on the other, naming
    both devices, before anything of the run is touched; on the same device it resumes. (The CPU profile measures no
    speed, so the round's timing is edited into its log as a GPU's would be.)"""
    from ferret.dispatch.runlog import StopReason
    from ferret.errors import UsageError
    from ferret.gate.platform_info import device_name

    gates, runs = dirs
    log = _dispatch(
        dirs, ScriptedOptimizer([[Proposal(source=HONEST, approach="honest")], KeyboardInterrupt()]), max_rounds=3
    ).run()
    assert log.status == "incomplete" and len(log.rounds) == 1
    folder = runs / log.run_id
    data = json.loads((folder / "run.json").read_text())
    timing = data["rounds"][0]["candidates"][0]["gate"]["timing"]
    roles = {"optimizer": ScriptedOptimizer([[]]), "reviewer": StaticReviewer(), "gates_dir": gates}

    here = device_name()
    other = "NVIDIA H200" if "H200" not in here else "NVIDIA H100 80GB HBM3"  # another card whatever runs the test
    timing.update(measured=True, device=other)
    (folder / "run.json").write_text(json.dumps(data))
    before = (folder / "run.json").read_bytes()
    refused = re.escape(f"{folder}: its rounds were timed on {other} and this machine's device is {here}")
    with pytest.raises(UsageError, match=refused):
        Dispatcher.resuming(folder, **roles)
    with pytest.raises(UsageError, match=refused):
        _dispatch(dirs, ScriptedOptimizer([[]]), max_rounds=3).run(resume=folder)
    assert (folder / "run.json").read_bytes() == before

    timing.update(device=here)
    (folder / "run.json").write_text(json.dumps(data))
    resumed = Dispatcher.resuming(folder, **roles).run()
    assert resumed.run_id == log.run_id and len(resumed.rounds) == 1 and resumed.stop == StopReason.NOTHING_TO_TRY


def test_profile_mistakes_are_usage_errors(dirs):
    import torch

    from ferret.errors import UsageError

    gates, runs = dirs
    roles = {"optimizer": ScriptedOptimizer([]), "reviewer": StaticReviewer(), "gates_dir": gates, "runs_dir": runs}
    with pytest.raises(UsageError, match="profile 'foo' is not one of cpu, gpu"):
        Dispatcher(CONTRACT, profile="foo", **roles)
    if not torch.cuda.is_available():
        with pytest.raises(UsageError, match=r"profile gpu needs a CUDA GPU, and this machine has none"):
            Dispatcher(CONTRACT, profile="gpu", **roles)


def test_progress_goes_to_the_ferret_logger_by_default(dirs, caplog):
    import logging

    optimizer = ScriptedOptimizer([[Proposal(source=WRONG, approach="wrong")], []])
    with caplog.at_level(logging.INFO, logger="ferret"):
        log = _dispatch(dirs, optimizer, max_rounds=1).run()
    messages = [r.getMessage() for r in caplog.records if r.name == "ferret"]
    assert any(m.startswith(f"run {log.run_id}: optimizer scripted-optimizer") for m in messages), messages
    assert any("round 1, candidate 1: gate FAIL" in m for m in messages), messages


def test_choosing_the_roles_is_a_step_the_command_line_can_show(dirs, monkeypatch):
    """The offline optimizer lists its template space when it is made (MLA's: ~20 s), before any line is said: the
    roles' set-up is a step, so the command line's bar (or heartbeat) shows what the wait is."""
    from ferret.progress import Reporter
    from ferret.roles import resolve
    from ferret.roles.offline import TemplateSearchOptimizer

    events: list[tuple | str] = []

    class Recorder(Reporter):
        def step(self, task, done, total, label=""):
            events.append((task, done, total, label))

    made = TemplateSearchOptimizer.from_contract.__func__

    def from_contract(cls, contract_path):
        events.append("the template search is made")
        return made(cls, contract_path)

    monkeypatch.setattr(resolve.registry, "available_model", lambda specs: None)  # no model: the offline roles
    monkeypatch.setattr(TemplateSearchOptimizer, "from_contract", classmethod(from_contract))
    gates, runs = dirs
    dispatcher = Dispatcher(CONTRACT, gates_dir=gates, runs_dir=runs, profile="cpu", progress=Recorder())
    assert dispatcher.optimizer.name == "template-search"
    assert events == [
        ("choosing the roles", 0, 3, "the optimizer"),
        "the template search is made",
        ("choosing the roles", 1, 3, "the reviewer"),
        ("choosing the roles", 2, 3, "the test-writer"),
        ("choosing the roles", 3, 3, ""),
    ]


def test_each_proposal_says_where_it_stands_against_the_floor():
    from ferret.dispatch.dispatcher import _floor_text
    from ferret.gate.models import CaseTiming, TimingResult

    def case(name: str, fraction: float | None) -> CaseTiming:
        return CaseTiming(case=name, candidate_ms=1.0, baseline_ms=2.0, speedup=2.0, fraction_of_floor=fraction)

    timed = TimingResult(measured=True, cases=[case("a", 0.314), case("b", 0.12)], roofline_source="contract")
    assert _floor_text(timed) == ", at 31%/12% of the floor"
    generic = TimingResult(measured=True, cases=[case("a", 0.5)], roofline_source="generic")
    assert _floor_text(generic) == ", at 50% of the floor (generic roofline)"
    assert _floor_text(TimingResult(measured=True, cases=[case("a", None)])) == ""


def test_the_optimizer_sees_a_compilers_log_whole_and_why_the_judge_refused_a_file():
    from ferret.dispatch.dispatcher import COMPILE_LOG_CHARS, _feedback
    from ferret.dispatch.runlog import CandidateRecord
    from ferret.gate.models import CaseSummary, VerdictSummary

    log = 'candidate.cu(3): error: identifier "INFINITY" is undefined\n' + "y" * 1500
    gate = VerdictSummary.model_construct(
        passed=False,
        first_failing_stage=None,
        detections=[],
        cases={
            "typical@bfloat16": CaseSummary.model_construct(failure="compile_error", message=log, stages={}),
            "odd@bfloat16": CaseSummary.model_construct(failure="exception", message="z" * 500, stages={}),
        },
    )
    record = CandidateRecord(
        round=1,
        index=1,
        approach="cuda",
        file="c.py",
        sha256="0" * 64,
        gate=gate,
        error="UsageError: c.py is a cuda candidate (it imports ferret.backends.cuda), but ...",
    )
    failures = _feedback(record).failures
    assert failures[0].startswith("not judged: UsageError: c.py is a cuda candidate")
    assert any(log in line for line in failures), "the compiler's log, whole (it is under the limit)"
    assert any(line.endswith("z" * 200) and "z" * 201 not in line for line in failures), "other messages: one line"
    assert COMPILE_LOG_CHARS >= 2000


def test_the_dispatchers_options_are_one_record_or_its_fields_by_name(dirs):
    """`Dispatcher(contract, DispatchOptions(...))` and `Dispatcher(contract, field=...)` are the same dispatcher;
    a field the record does not have is a TypeError, not ignored."""
    import dataclasses

    from ferret.dispatch.dispatcher import DispatchOptions

    gates, runs = dirs
    options = DispatchOptions(
        optimizer=ScriptedOptimizer([]),
        reviewer=StaticReviewer(),
        gates_dir=gates,
        runs_dir=runs,
        profile="cpu",
        max_rounds=2,
        proposals_per_round=3,
    )
    fields = {f.name: getattr(options, f.name) for f in dataclasses.fields(options)}
    for dispatcher in (Dispatcher(CONTRACT, options), Dispatcher(CONTRACT, **fields)):
        assert (dispatcher.gates_dir, dispatcher.runs_dir, dispatcher.profile) == (Path(gates), Path(runs), "cpu")
        assert (dispatcher.max_rounds, dispatcher.proposals_per_round) == (2, 3)
        assert dispatcher.optimizer is options.optimizer and dispatcher.reviewer is options.reviewer
    assert Dispatcher(CONTRACT, options, max_rounds=1).max_rounds == 1  # a field by name over the record's
    with pytest.raises(TypeError, match="max_round"):
        Dispatcher(CONTRACT, options, max_round=1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.max_rounds = 5  # type: ignore[misc]


def test_a_gate_below_its_audit_minimum_never_gives_accepted(dirs, tmp_path, monkeypatch):
    """A contract that states audit.min_score: a run that would be accepted stays incomplete, saying why, while the
    gate has no trusted audit or its last one scored below it; a trusted audit at or above it lets it through. The
    timing is replaced as in the accept test above (only the timing: correctness is judged for real)."""
    from ferret.audit.record import write_audit
    from ferret.gate.build import build_gate
    from ferret.gate.models import TimingResult

    real_check = dispatcher_module.Judge.check

    def check_with_speed(self, *args, **kwargs):
        verdict = real_check(self, *args, **kwargs)
        timing = TimingResult(measured=True, min_speedup_required=1.5, target_met=True, geomean_speedup=2.0)
        return verdict.model_copy(update={"timing": timing})

    monkeypatch.setattr(dispatcher_module.Judge, "check", check_with_speed)
    contract = write_contract(tmp_path, lambda d: d.update(audit={"min_score": 0.95}), link_tasks=True)
    gates, runs = dirs
    gate = build_gate(contract, gates, "cpu")

    def dispatch():
        optimizer = ScriptedOptimizer([[Proposal(source=HONEST, approach="honest")]])
        return Dispatcher(
            contract, optimizer=optimizer, reviewer=ScriptedReviewer(), gates_dir=gates, runs_dir=runs, profile="cpu"
        ).run()

    unaudited = dispatch()
    assert unaudited.status == "incomplete" and "audit.min_score 0.95" in unaudited.stop_reason
    assert "no audit of gate" in unaudited.audit_note

    from audit_records import audit_record as _record

    write_audit(gate, _record(gate.name, score=0.5))
    weak = dispatch()
    assert weak.status == "incomplete" and weak.audit_score == 0.5
    assert "the gate's last audit scored 0.5, below the contract's audit.min_score 0.95" in weak.stop_reason

    # `--audit`: the audit runs once the gate is built, before the rounds, and its record is what acceptance reads.
    import ferret.audit.run as audit_run

    audited = []

    def audit_stub(contract_path, options):
        record = _record(gate.name, score=0.97)
        audited.append((Path(contract_path), options.gates_dir, options.profile))
        write_audit(gate, record)
        return record

    monkeypatch.setattr(audit_run, "run_audit", audit_stub)
    optimizer = ScriptedOptimizer([[Proposal(source=HONEST, approach="honest")]])
    strong = Dispatcher(
        contract, optimizer=optimizer, reviewer=ScriptedReviewer(), gates_dir=gates, runs_dir=runs, profile="cpu", audit=True
    ).run()
    assert audited == [(contract, gates, "cpu")]
    assert strong.status == "accepted" and strong.audit_score == 0.97 and "scored 97.0%" in strong.audit_note
