"""Where a check's seconds go: the phase clock, the timing reporter's phases, and a verdict's timeline."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from ferret_testkit import RMSNORM_CONTRACT, TRITON_RMSNORM  # noqa: E402

from ferret.contract.task import Task  # noqa: E402
from ferret.gate.judge import Judge  # noqa: E402
from ferret.gate.models import Verdict  # noqa: E402
from ferret.gate.phases import PhaseClock, TimingPhases  # noqa: E402
from ferret.gate.report import read_verdicts  # noqa: E402
from ferret.progress import Reporter  # noqa: E402


def test_phase_clock_sums_a_name_and_keeps_first_seen_order():
    clock = PhaseClock()
    with clock.phase("static_scan"):
        pass
    clock.add("run:correctness", 1.5)
    clock.add("static_scan", 0.25)
    clock.add("run:correctness", 2.0)
    clock.add("stress", -1.0)  # a clock that went backwards counts as nothing, never as negative time
    phases = clock.phases()
    assert [p.name for p in phases] == ["static_scan", "run:correctness", "stress"]
    assert phases[0].seconds >= 0.25
    assert phases[1].seconds == 3.5
    assert phases[2].seconds == 0.0


class _Recorder(Reporter):
    def __init__(self):
        self.events = []

    def say(self, message):
        self.events.append(("say", message))

    def step(self, task, done, total, label=""):
        self.events.append(("step", task, done, total))


def test_timing_phases_follow_the_timing_steps_and_pass_everything_on():
    inner, clock = _Recorder(), PhaseClock()
    phases = TimingPhases(inner, clock)
    phases("timing 2 cases against the baseline")
    phases.step("timing", 0, 2, "starting the timing process")
    phases.step("timing", 1, 2, "case b")
    phases.step("timing", 2, 2, "done")
    phases.close_at_end()
    assert [p.name for p in clock.phases()] == ["timing_inputs", "timing_process", "timed_answers"]
    assert inner.events == [
        ("say", "timing 2 cases against the baseline"),
        ("step", "timing", 0, 2),
        ("step", "timing", 1, 2),
        ("step", "timing", 2, 2),
    ]


def test_timing_whose_pools_were_drawn_before_starts_in_the_timing_process():
    """The judge draws the pools and starts the processes beside the candidate's run (its own timing_inputs
    phase); what TimingPhases then sees, waiting included, is the timing processes' until the last step."""
    clock = PhaseClock()
    phases = TimingPhases(_Recorder(), clock, first="timing_process")
    phases.step("timing", 0, 1, "waiting for the timing processes to warm up")
    phases.step("timing", 1, 1, "done")
    phases.close_at_end()
    assert [p.name for p in clock.phases()] == ["timing_process", "timed_answers"]


def test_timing_that_never_started_its_process_is_all_inputs():
    clock = PhaseClock()
    TimingPhases(_Recorder(), clock).close_at_end()
    assert [p.name for p in clock.phases()] == ["timing_inputs"]


def test_a_verdict_says_where_its_seconds_went(rmsnorm_gate, rmsnorm_gates_dir):
    judge = Judge(Task.load(RMSNORM_CONTRACT), rmsnorm_gates_dir, "cpu")
    first = judge.check(TRITON_RMSNORM)
    second = judge.check(TRITON_RMSNORM)
    assert first.passed and second.passed
    names = [p.name for p in first.phases]
    # Every part of the check, in the order it ran: finding and verifying the gate once per judge (the first
    # verdict carries it), then per check the lock, the scan, the fresh cases, the candidate's process part
    # by part, the lock again, and the comparisons part by part. The CPU profile times nothing.
    assert names[:6] == ["gate_setup", "gate_verify", "static_scan", "fresh_draw", "candidate_inputs", "candidate_start"]
    assert names[-5:] == ["gate_reverify", "compare:correctness", "compare:dtypes", "compare:edge_cases", "compare:fresh_cases"]
    # The candidate's parts are read from its progress, polled every 0.1 s (none read after the process exits), and
    # its variants interleave parts (each case at the primary dtype, correctness, then its other dtypes): a variant
    # quicker than one poll does not show, its time going to the phase before it, and each part's phase sums its
    # variants in the order first seen. On CI's loaded machine the first variant (correctness) went unseen, so that
    # run:dtypes came first. So the candidate's phases are fixed only as distinct parts of the job, at least one of
    # them seen (the interpreter's variants take seconds against the 0.1 s poll); which parts the positions seen make
    # is the next test's.
    runs = names[6:-5]
    all_runs = {"run:correctness", "run:dtypes", "run:edge_cases", "run:fresh_cases"}
    assert runs and len(set(runs)) == len(runs) and set(runs) <= all_runs, runs
    assert [p.name for p in second.phases][:5] == names[1:6], "the judge's set-up is said once, in its first verdict"
    assert "gate_setup" not in [p.name for p in second.phases]
    assert all(p.seconds >= 0 for p in first.phases + second.phases)
    # Phases of the check itself fit in its wall time (the judge's set-up came before it started).
    assert sum(p.seconds for p in second.phases) <= second.seconds + 0.05
    assert sum(p.seconds for p in second.phases) >= 0.5 * second.seconds
    # The timeline is part of the published verdict: it survives report.json and the JSON round trip.
    recorded = read_verdicts(rmsnorm_gate)[-1]
    assert recorded.phases == second.phases
    assert Verdict.model_validate_json(second.model_dump_json()).phases == second.phases


def test_the_candidates_phases_are_the_parts_of_the_positions_seen_in_the_order_seen(
    rmsnorm_gate, rmsnorm_gates_dir, tmp_path, monkeypatch
):
    """What the verdict's run phases are made of, without the poll's timing: the positions the watcher saw, each the
    part of that variant. A variant never seen (here the first, correctness) is charged to the phase before it, and the
    judge's clock then keeps each part once, first seen first: run:dtypes before run:correctness."""
    from ferret.gate import candidate_run
    from ferret.sandbox.launch import ProcessOutcome

    judge = Judge(Task.load(RMSNORM_CONTRACT), rmsnorm_gates_dir, "cpu")
    parts = [record.part for record in judge.manifest.variants]
    assert parts[:3] == ["correctness", "dtypes", "dtypes"] and parts[3] == "correctness"
    edge = parts.index("edge_cases")
    seen = [1, 3, 4, edge]

    def watched(args, workdir, env, options):
        for position in seen:
            options.on_progress(position)
        return ProcessOutcome(returncode=0, kind="exited", message="", seconds=0.0, stderr_tail="", peak_rss_mb=0.0)

    monkeypatch.setattr(candidate_run, "run_isolated", watched)
    workdir = tmp_path / "candidate"
    workdir.mkdir()
    run = candidate_run.run_candidate(
        judge.context, TRITON_RMSNORM, workdir, candidate_run.CandidateRunOptions("cpu", run_stress=False)
    )
    assert [name for name, _ in run.phases] == [
        "candidate_inputs",
        "candidate_start",
        "run:dtypes",
        "run:correctness",
        "run:dtypes",
        "run:edge_cases",
    ]
    clock = PhaseClock()
    for name, seconds in run.phases:
        clock.add(name, seconds)
    assert [p.name for p in clock.phases()] == [
        "candidate_inputs",
        "candidate_start",
        "run:dtypes",
        "run:correctness",
        "run:edge_cases",
    ]
