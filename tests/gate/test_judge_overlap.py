"""What the judge does at once: the timing processes started in a thread beside the fresh draw and the candidate's
run (`_TimingStart`), the fresh draw and the gate inputs (the comparisons: tests/gate/test_comparisons.py)."""

from __future__ import annotations

import threading
import types

import pytest

from ferret.errors import ContractError
from ferret.gate import judge as judge_module
from ferret.gate.judge import Judge, _TimingStart
from ferret.gate.phases import PhaseClock


class _Started:
    """Stands for `StartedTiming`: all the judge's thread asks of it is `stop()`."""

    def __init__(self):
        self.stopped = 0

    def stop(self):
        self.stopped += 1


def test_the_timing_start_runs_in_a_thread_beside_the_caller():
    release, started = threading.Event(), _Started()

    def start():
        assert release.wait(timeout=30), "the caller never got past the constructor"
        return started

    starting = _TimingStart(start, wanted=True)  # returns while start() is still blocked  # pyright: ignore[reportArgumentType]
    release.set()
    clock = PhaseClock()
    assert starting.result(clock) is started
    assert [p.name for p in clock.phases()] == ["timing_start_wait"]
    starting.stop()
    assert started.stopped == 1


def test_stop_stops_what_was_started_when_the_check_ended_before_asking_for_it():
    started = _Started()
    starting = _TimingStart(lambda: started, wanted=True)  # pyright: ignore[reportArgumentType]
    starting.stop()  # the candidate's run raised: the result was never asked for
    assert started.stopped == 1


def test_what_the_start_raised_is_raised_by_result_and_stop_is_quiet():
    def start():
        raise ContractError("contracts/x.yaml: roofline.bytes: the eager baseline timed under its floor")

    starting = _TimingStart(start, wanted=True)
    with pytest.raises(ContractError, match="roofline.bytes"):
        starting.result(PhaseClock())
    starting.stop()


def test_nothing_is_started_where_timing_is_not_wanted():
    calls = []
    starting = _TimingStart(lambda: calls.append(1), wanted=False)
    clock = PhaseClock()
    assert starting.result(clock) is None
    starting.stop()
    assert calls == [] and clock.phases() == []


def _first_two_meet(real):
    """`real`, whose first two calls must be running at the same time (else the barrier breaks: an error)."""
    both_in, calls, lock = threading.Barrier(2, timeout=30), [], threading.Lock()

    def wrapped(*args, **kwargs):
        with lock:
            calls.append(args)
            first_two = len(calls) <= 2
        if first_two:
            both_in.wait()
        return real(*args, **kwargs)

    wrapped.calls = calls  # type: ignore[attr-defined]
    return wrapped


def test_fresh_cases_are_drawn_at_once_in_the_plans_order(monkeypatch):
    from ferret.gate import fresh

    planned = [("first", ("stratum_a",)), ("second", ()), ("third", ())]
    monkeypatch.setattr(fresh, "plan_fresh_cases", lambda contract, profile, rng: planned)
    monkeypatch.setattr(fresh, "_fresh_variant", _first_two_meet(lambda task, case, strata, device: (case, strata, device)))
    task = types.SimpleNamespace(contract=None)
    assert fresh.draw_fresh_cases(task, "cpu", "cpu") == [  # type: ignore[arg-type]
        ("first", ("stratum_a",), "cpu"),
        ("second", (), "cpu"),
        ("third", (), "cpu"),
    ]


def test_gate_inputs_are_written_at_once_and_the_job_keeps_the_manifests_order(rmsnorm_gate, monkeypatch, tmp_path):
    from ferret_testkit import RMSNORM_CONTRACT, TRITON_RMSNORM

    from ferret.contract.task import Task
    from ferret.gate import candidate_run
    from ferret.gate.context import GateContext
    from ferret.gate.lock import verify_gate
    from ferret.gate.models import GateManifest

    task = Task.load(RMSNORM_CONTRACT)
    manifest = GateManifest.model_validate(verify_gate(rmsnorm_gate))
    assert len(manifest.variants) >= 2
    writing = _first_two_meet(candidate_run.prepare_inputs)
    monkeypatch.setattr(candidate_run, "prepare_inputs", writing)
    context = GateContext(task, manifest, rmsnorm_gate)
    job = candidate_run.write_candidate_job(
        context, TRITON_RMSNORM, tmp_path, candidate_run.CandidateRunOptions("cpu", run_stress=False)
    )
    assert [v.id for v in job.variants] == [r.id for r in manifest.variants]
    # The job names each file as the confined process sees it (`FolderView`); on the host they lie in the folder.
    on_host = [candidate_run.gate_inputs_file(tmp_path, v.id) for v in job.variants]
    assert all(p.is_file() for p in on_host) and len(writing.calls) == len(manifest.variants)
    assert all(v.inputs_file.endswith(f"in/{v.id}.safetensors") for v in job.variants)


def test_a_check_starts_timing_before_the_fresh_draw_and_always_stops_it(rmsnorm_gate, rmsnorm_gates_dir, monkeypatch):
    """The wiring in `Judge.check`: the timing start is made before the fresh draw (so it runs beside it and the
    candidate's run), its result asked for after the run, and it is stopped at the end."""
    from ferret_testkit import RMSNORM_CONTRACT, TRITON_RMSNORM

    from ferret.contract.task import Task

    events = []

    class Recording(_TimingStart):
        def __init__(self, start, wanted):
            events.append(("made", wanted))
            super().__init__(start, wanted)

        def result(self, clock):
            events.append(("result",))
            return super().result(clock)

        def stop(self):
            events.append(("stop",))
            super().stop()

    real_draw = judge_module.draw_fresh_cases
    monkeypatch.setattr(judge_module, "_TimingStart", Recording)
    monkeypatch.setattr(judge_module, "draw_fresh_cases", lambda *a: events.append(("fresh_draw",)) or real_draw(*a))
    verdict = Judge(Task.load(RMSNORM_CONTRACT), rmsnorm_gates_dir, "cpu").check(TRITON_RMSNORM, run_stress=False)
    assert verdict.passed
    assert events == [("made", False), ("fresh_draw",), ("result",), ("stop",)]  # the CPU profile times nothing


def test_a_check_writes_the_gate_inputs_beside_the_fresh_draw(rmsnorm_gates_dir, monkeypatch):
    """The gate variants' inputs are written into the candidate's folder while the fresh cases are drawn (the
    barrier breaks, an error, unless both run at once), and the candidate's process starts once both are done."""
    from ferret_testkit import RMSNORM_CONTRACT, TRITON_RMSNORM

    from ferret.contract.task import Task
    from ferret.gate import candidate_run

    # Generous: on a loaded machine the gate inputs may take long to reach the barrier; run one after the other,
    # the two would wait out this timeout and break it.
    both_in = threading.Barrier(2, timeout=300)
    real_draw, real_write = judge_module.draw_fresh_cases, judge_module.write_gate_inputs
    written = []

    def drawing(*args):
        both_in.wait()
        return real_draw(*args)

    def writing(context, workdir, checked):
        both_in.wait()
        real_write(context, workdir, checked)
        written.extend(sorted(p.name for p in (workdir / "in").iterdir()))

    monkeypatch.setattr(judge_module, "draw_fresh_cases", drawing)
    monkeypatch.setattr(judge_module, "write_gate_inputs", writing)
    monkeypatch.setattr(candidate_run, "write_gate_inputs", lambda *a: pytest.fail("the gate inputs written twice"))
    judge = Judge(Task.load(RMSNORM_CONTRACT), rmsnorm_gates_dir, "cpu")
    verdict = judge.check(TRITON_RMSNORM, run_stress=False)
    failed = [(r.id, r.failure, [s.reasons for s in r.stages or [] if not s.passed]) for r in verdict.variants if not r.passed]
    assert verdict.passed, (verdict.parts, failed, verdict.detections, verdict.fault)
    assert written == sorted(f"{r.id}.safetensors" for r in judge.manifest.variants)


def test_a_check_judges_variants_while_the_candidates_process_still_runs(rmsnorm_gates_dir, monkeypatch):
    """The candidate's process saying it moved on reaches the comparisons (`run_candidate`'s `on_moved`): some
    variant is judged before the process has ended, and each variant is judged once."""
    from ferret_testkit import RMSNORM_CONTRACT, TRITON_RMSNORM

    from ferret.contract.task import Task
    from ferret.gate import candidate_run

    running = threading.Event()
    judged_while_running = []
    real_isolated, real_judge = candidate_run.run_isolated, judge_module.judge_variant

    def isolated(*args, **kwargs):
        running.set()
        try:
            return real_isolated(*args, **kwargs)
        finally:
            running.clear()

    def judging(contract, ids, *rest):
        judged_while_running.append((ids[0], running.is_set()))
        return real_judge(contract, ids, *rest)

    monkeypatch.setattr(candidate_run, "run_isolated", isolated)
    monkeypatch.setattr(judge_module, "judge_variant", judging)
    judge = Judge(Task.load(RMSNORM_CONTRACT), rmsnorm_gates_dir, "cpu")
    assert not judge.judge_early  # the CPU profile judges after the run (the interpreter needs the cores)
    judge.judge_early = True  # as on the GPU profile
    verdict = judge.check(TRITON_RMSNORM, run_stress=False)
    assert verdict.passed
    assert sorted(vid for vid, _ in judged_while_running) == sorted(r.id for r in verdict.variants)
    assert any(during for _, during in judged_while_running), judged_while_running
    # Left as the CPU profile has it, every variant is judged once the candidate's process has ended.
    judged_while_running.clear()
    judge.judge_early = False
    verdict = judge.check(TRITON_RMSNORM, run_stress=False)
    assert verdict.passed and not any(during for _, during in judged_while_running), judged_while_running
    assert sorted(vid for vid, _ in judged_while_running) == sorted(r.id for r in verdict.variants)
