"""The timing guards rehearsed on the CPU (`time_candidate(..., device="cpu")`): the real timing process,
input pool, output slots, fingerprint re-check and the judge's check of every timed answer, under the
Triton interpreter with a plain clock. The GPU runs of the same candidates are in
tests/gpu/test_gpu_timing_guards.py; here CI sees the same logic break if it breaks."""

from __future__ import annotations

from pathlib import Path

import pytest
from timing_cheats import LAZY, REWRITES_INPUTS, SIMPLIFIED, TORCH_WHEN_TIMED, write_cheat

from ferret import wire
from ferret.contract.task import Task
from ferret.gate.context import GateContext
from ferret.gate.judge import locate_gate
from ferret.gate.lock import verify_gate
from ferret.gate.models import GateManifest
from ferret.gate.serving import NOT_MEASURED_ON_CPU
from ferret.gate.timing import TimingOptions, time_candidate

REPO = Path(__file__).resolve().parents[2]
CONTRACT = REPO / "contracts" / "rmsnorm.yaml"
HONEST = REPO / "tasks" / "rmsnorm" / "candidates" / "triton_rmsnorm.py"


@pytest.fixture(scope="module")
def rehearse(tmp_path_factory):
    task = Task.load(CONTRACT)
    gate = locate_gate(CONTRACT, task.contract, tmp_path_factory.mktemp("gates"), "cpu", lambda m: None)
    manifest = GateManifest.model_validate(verify_gate(gate))
    folder = tmp_path_factory.mktemp("candidates")

    def run_one(name: str, wrapper: str | None):
        # The rehearsal has no correctness runs before it: the switch comes after the warm-up calls.
        path = HONEST if wrapper is None else write_cheat(folder / f"{name}.py", wrapper, after=3)
        return time_candidate(context, path, TimingOptions(lambda m: None, device="cpu"))

    context = GateContext(task, manifest, gate)
    run_one.task, run_one.manifest, run_one.gate, run_one.context = task, manifest, gate, context  # type: ignore[attr-defined]
    return run_one


def test_honest_candidate_rehearses_clean_and_every_timed_answer_is_checked(rehearse):
    result = rehearse("honest", None)
    assert not result.measured and "not speedups" in result.reason
    assert len(result.cases) == 1 and result.cases[0].case == "typical"
    case = result.cases[0]
    # the answer each slot was left with, and the timed calls kept at random (`AnswerSample`)
    assert case.pool_sets == 2 and case.answers_checked >= case.pool_sets + 1 + min(wire.SAMPLED_ANSWERS, 3)
    assert case.flags == [] and result.detections == []
    assert case.floor_ms is None  # no datasheet floor on the CPU
    # CUDA graphs need a GPU: the result says serving timing was not measured, and no case carries any
    assert result.serving_reason == NOT_MEASURED_ON_CPU and not result.serving_measured
    assert case.serving is None
    # where the timing processes' time went, on the judge's clock: set-up (start, imports) is never free
    assert set(result.process_seconds) == {"setup", "rounds", "post"} and result.process_seconds["setup"] > 0
    # and inside each process, by part: the reference's warm-up holds torch.compile of the baseline
    assert {
        "reference:load",
        "reference:pool",
        "reference:warm_up",
        "candidate:load",
        "candidate:warm_up",
        "candidate:wall",
        "candidate:replay",
        "candidate:answers",
    } <= set(case.process_seconds)
    assert case.process_seconds["reference:warm_up"] > 0


def test_the_reference_timer_warms_up_in_its_turn_and_marks_the_compile_cache_warm(rehearse):
    """The real timing process takes its warm-up turn (ferret/bench/warmup_turn.py) in the gate's compile cache and,
    once warmed up, leaves the mark that lets later reference timers warm up side by side."""
    cache = rehearse.gate.parent / ".cache" / "inductor"
    for mark in cache.glob("warmed-*"):
        mark.unlink()
    case = rehearse("honest", None).cases[0]
    assert len(list(cache.glob("warmed-*"))) == 1, sorted(p.name for p in cache.iterdir())
    assert "reference:warm_up_turn" in case.process_seconds


def test_a_candidate_that_leaves_old_answers_is_named_twice(rehearse):
    result = rehearse("lazy", LAZY)
    cheats = {d.cheat for d in result.detections}
    assert {"cross_call_caching", "warmup_detection"} <= cheats, result.cases[0].flags


def test_math_simplified_after_the_warm_up_is_named_by_its_answers_alone(rehearse):
    result = rehearse("simplified", SIMPLIFIED)
    case = result.cases[0]
    # Deterministic: the fingerprint re-check agrees with it; only the answers show it.
    assert not any(f.startswith("cross_call_caching") for f in case.flags), case.flags
    assert any(f.startswith("warmup_detection: the answer a timed call left in output slot") for f in case.flags), case.flags
    assert {d.cheat for d in result.detections} == {"warmup_detection"}


def test_inputs_rewritten_to_an_answered_set_are_named_by_the_judges_copy(rehearse):
    """The timing process hands the candidate its input sets; the judge drew them and checks against its
    own copy, so rewriting them in the timing process cannot make a replayed answer look right."""
    result = rehearse("rewrites_inputs", REWRITES_INPUTS)
    case = result.cases[0]
    assert any(f.startswith("input_mutation: after the timed calls, read-only input") for f in case.flags), case.flags
    assert any(f.startswith("warmup_detection: the answer a timed call left in output slot") for f in case.flags), case.flags
    assert {"input_mutation", "warmup_detection"} <= {d.cheat for d in result.detections}


H200 = {"bytes_per_s": 4.8e12, "flops_per_s": 989e12, "l2_bytes": 0}


def test_the_floor_is_computed_by_the_judge_from_the_contracts_roofline(rehearse, monkeypatch):
    """The floor is computed in the judge's process (the timing processes share memory with the candidate), from
    the contract's roofline on the inputs the judge drew, and every timed case says where it stands."""
    from ferret.gate import timing

    monkeypatch.setattr(timing, "_peaks_seen_by_judge", lambda device: H200)
    case = rehearse("honest", None).cases[0]
    # The CPU gate's first case, M=16, N=512, bfloat16: x read, weight read, y written.
    moved = 16 * 512 * 2 + 512 * 2 + 16 * 512 * 2  # 33,792 bytes
    work = 4 * 16 * 512 + 3 * 16  # 32,816 flops
    assert case.roofline is not None and case.roofline.source == "contract"
    assert (case.roofline.bytes, case.roofline.flops) == (moved, work)
    assert case.floor_ms == pytest.approx(moved / 4.8e12 * 1e3)  # memory-bound: bytes set the floor
    assert case.fraction_of_floor == pytest.approx(case.floor_ms / case.candidate_ms)
    assert case.achieved_tb_per_s == pytest.approx(moved / (case.candidate_ms * 1e-3) / 1e12)
    assert case.achieved_tflop_per_s == pytest.approx(work / (case.candidate_ms * 1e-3) / 1e12)
    assert not any(f.startswith("impossible_speed:") for f in case.flags), case.flags


def test_a_baseline_under_the_floor_is_the_contracts_error_not_a_cheat(rehearse, monkeypatch):
    """The sanity rule: the baseline is honest, so a datasheet (or a roofline) that puts it under its floor
    makes the roofline wrong, and the check says so as a contract error naming the file and field."""
    from ferret.errors import ContractError
    from ferret.gate import timing

    monkeypatch.setattr(timing, "_peaks_seen_by_judge", lambda device: {"bytes_per_s": 1e3, "flops_per_s": 1e3, "l2_bytes": 0})
    with pytest.raises(ContractError, match=r"rmsnorm\.yaml: roofline: the eager baseline took .* under 0\.9 x its"):
        rehearse("honest", None)


ESCAPES_WHEN_TIMED = '''

import itertools
import os

_CALLS = itertools.count(1)


def run(inputs, outputs, params, trace=None):
    """Honest, but once past the warm-up (in the timing process) it writes a file beside its folder and
    swallows the refusal."""
    if next(_CALLS) > {after}:
        try:
            with open(os.path.join(os.path.dirname(os.getcwd()), "planted-by-the-timed-candidate"), "w") as handle:
                handle.write("x")
        except OSError:
            pass
    _honest_run(inputs, outputs, params, trace)
'''


def test_a_write_outside_its_folder_in_the_timing_process_is_flagged(rehearse):
    """The candidate's timer runs under the same audit hooks as the runner: the refused write is a flag, named."""
    result = rehearse("escapes", ESCAPES_WHEN_TIMED)
    flags = result.cases[0].flags
    assert any(f.startswith("gate_tampering: file_write_refused: the sandbox refused open for writing") for f in flags), flags
    assert "gate_tampering" in {d.cheat for d in result.detections}


def test_timers_started_beside_the_run_wait_longer_than_a_step_may_take(rehearse):
    """The judge starts both timing processes beside the candidate's correctness run (`start_timing`) and conducts
    them later (`finish_timing`). Waiting for the judge is not a stall: with a step timeout of 4 s, processes held
    for twice that still time the case; the timeout counts from the first step. (A 2 s timeout killed an honest post
    step on a loaded 2-core CI machine, 2026-12-01: the steps themselves need the margin.)"""
    import dataclasses
    import time

    from ferret.gate import timing

    budgets = rehearse.task.contract.budgets.model_copy(update={"case_timeout_s": 4.0})
    task = dataclasses.replace(rehearse.task, contract=rehearse.task.contract.model_copy(update={"budgets": budgets}))
    said: list[str] = []
    started = timing.start_timing(
        GateContext(task, rehearse.manifest, rehearse.gate), HONEST, timing.TimingOptions(said.append, device="cpu")
    )
    try:
        assert all(t.running for t in started.timers) and not any(t.conducted.is_set() for t in started.timers)
        time.sleep(8.0)  # the candidate's run, as far as the timers know
        assert all(t.running for t in started.timers), [t.outcome for t in started.timers]
        result = timing.finish_timing(task, started, said.append, device="cpu")
    finally:
        started.stop()
    assert [c.case for c in result.cases] == ["typical"] and result.cases[0].flags == [], result.reason
    assert "not speedups" in result.reason
    assert any("timing processes started for 1 cases" in line for line in said), said
    assert not started.workdir.exists()


def test_a_started_timing_that_is_not_needed_is_stopped_and_deleted(rehearse):
    """A candidate found incorrect is never timed: its started timers are killed and their folder (pools of inputs,
    hundreds of MB at production shapes) deleted."""
    from ferret.gate import timing

    started = timing.start_timing(rehearse.context, HONEST, timing.TimingOptions(lambda m: None, device="cpu"))
    assert started.workdir.is_dir() and all(t.running for t in started.timers)
    started.stop()
    assert not started.workdir.exists()
    assert not any(t.running for t in started.timers)
    assert all(t.process is None or t.process.poll() is not None for t in started.timers)


def test_a_timer_started_before_another_fails_to_start_is_stopped(rehearse, monkeypatch):
    """start_timing starts the candidate's timer, then the reference's: if the second start raises, the first is
    stopped (not left waiting for a judge that has gone) and the folder is deleted."""
    import tempfile

    import ferret.gate.timing as timing
    from ferret.gate.interleave import start_timer, stop_all

    started, stopped, folders = [], [], []

    def start_then_fail(timer, *args):
        if started:
            raise OSError("no more processes")
        started.append(timer)
        start_timer(timer, *args)

    def recording_stop_all(timers):
        stopped.extend(timers)
        stop_all(timers)

    real_mkdtemp = tempfile.mkdtemp

    def folder_in_tmp_path(*args, **kwargs):  # the module's own tempfile: every caller's mkdtemp comes here
        folder = real_mkdtemp(*args, **kwargs)
        if not args and not kwargs:  # the timing's folder has a plain temporary name: it says nothing of a judge
            folders.append(folder)
        return folder

    monkeypatch.setattr(timing, "start_timer", start_then_fail)
    monkeypatch.setattr(timing, "stop_all", recording_stop_all)
    monkeypatch.setattr(timing.tempfile, "mkdtemp", folder_in_tmp_path)
    with pytest.raises(OSError, match="no more processes"):
        timing.start_timing(rehearse.context, HONEST, timing.TimingOptions(device="cpu"))
    assert len(started) == 1 and started[0] in stopped
    assert started[0].thread is not None and not started[0].thread.is_alive()  # its process killed, its thread done
    assert folders and not any(Path(folder).exists() for folder in folders)


def test_math_handed_to_torch_once_timed_is_named_by_the_timers_aten_watch(rehearse):
    """Right answers, deterministic, no kernel of its own once timed: the answers check cannot see it, and on the
    GPU torch's kernels pass the profiler's account; the ATen watch over the timer's post-round calls names it."""
    result = rehearse("torch_when_timed", TORCH_WHEN_TIMED)
    flags = result.cases[0].flags
    assert any(
        f.startswith("library_call: PyTorch computed floating-point results during 3 of the candidate's timed") for f in flags
    ), flags
    assert "library_call" in {d.cheat for d in result.detections}
    assert not any(f.startswith("warmup_detection") for f in flags), flags  # its answers are right


IN_THE_SECOND_TIMER_ONLY = '''

import os


def run(inputs, outputs, params, trace=None):
    """Honest everywhere but in the candidate's second timing process (its folder is named 1): there the weight
    multiply is dropped."""
    if os.path.basename(os.getcwd()) == "1":
        inputs = {{"x": inputs["x"], "weight": torch.ones_like(inputs["weight"])}}
    _honest_run(inputs, outputs, params, trace)
'''


@pytest.fixture()
def two_of_each(monkeypatch):
    """Two candidate timers and two reference timers, as on the GPU for a short case (where there are 2 and 3)."""
    from ferret.gate import timing

    monkeypatch.setattr(timing, "candidate_processes", lambda repeats, device, floors_ms=None: 2)
    monkeypatch.setattr(timing, "reference_processes", lambda repeats, device, floors_ms=None: 2)


def test_two_candidate_and_two_reference_processes_rehearse_clean(rehearse, two_of_each):
    case = rehearse("honest", None).cases[0]
    assert len(case.process_ms["candidate"]) == 2 and len(case.process_ms["baseline"]) == 2
    assert case.flags == []
    # each process's timed answers (each slot's last, and the timed calls it kept at random), checked by the judge
    assert case.answers_checked >= 2 * (case.pool_sets + 1 + min(wire.SAMPLED_ANSWERS, 3))
    assert {"candidate:wall", "candidate1:wall", "reference:warm_up", "reference1:warm_up"} <= set(case.process_seconds)


def test_a_candidate_that_cheats_in_one_of_its_timing_processes_is_caught_by_that_ones_answers(
    rehearse, two_of_each, monkeypatch
):
    # The candidate tells its timers apart by their host folders' names: shown under the deny-list namespace (or no
    # sandbox), where the processes see the host's paths. Under an allow-list sandbox every timer reads the same
    # /home/user/work (docs/cheats.md 27), so that is not where this test can make one timer differ.
    from ferret.sandbox import launch

    monkeypatch.setenv(launch.SANDBOX_CHOICE, launch.DENY_LIST)
    result = rehearse("second_timer_only", IN_THE_SECOND_TIMER_ONLY)
    flags = result.cases[0].flags
    assert any(f.startswith("warmup_detection: the answer a timed call left in output slot") for f in flags), flags


@pytest.mark.parametrize("short_floor_ms,expected", [(1.0, (2, 5)), (0.0, (1, 1))])
def test_on_the_gpu_a_check_gets_several_timing_processes_per_role_only_for_a_short_case(
    rehearse, tmp_path, monkeypatch, short_floor_ms, expected
):
    """The judge's wiring (`_make_timers`, no process started): the floors of the drawn cases on the GPU's datasheet
    peaks decide how many timing processes each role gets. The rehearsal's case is short (a floor of nanoseconds);
    with the threshold at 0 no case is short."""
    from ferret import wire
    from ferret.gate import timing

    monkeypatch.setattr(timing, "_peaks_seen_by_judge", lambda device: H200)
    monkeypatch.setattr(timing, "SHORT_CASE_FLOOR_MS", short_floor_ms)
    cases = timing._prepare_cases(rehearse.context, tmp_path, "cpu")
    timers, _ = timing._make_timers(rehearse.task, rehearse.gate, HONEST, tmp_path, cases, True, "cuda")
    roles = [t.role for t in timers]
    assert (roles.count(wire.CANDIDATE_TIMER), roles.count(wire.REFERENCE_TIMER)) == expected
