"""The judge's conductor of the two timing processes (`ferret.gate.interleave`), driven with stand-in timing
processes that follow the step protocol of `ferret.wire` and log what they do: one process at a time, the
order alternating round by round, the candidate's process stopped while the reference works, and a process
that ends early named."""

from __future__ import annotations

import os
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ferret import wire
from ferret.gate.interleave import (
    TimerFailed,
    TimerProcess,
    conduct,
    rounds_in_turn,
    start_timer,
    stop_all,
    wait_until_done,
)

REPO = Path(__file__).resolve().parents[2]

STAND_IN = textwrap.dedent(
    """
    import os, sys, threading, time
    from pathlib import Path
    from ferret import wire
    folder, role, cases, repeats, log, die_at = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), """
    """Path(sys.argv[5]), sys.argv[6]
    def write(name, text):
        wire.write_step(folder / name, text)
    if role.startswith("candidate"):
        def beat():
            with open(folder / "heartbeat", "a") as out:
                while True:
                    out.write(f"{time.time()}\\n"); out.flush(); time.sleep(0.002)
        threading.Thread(target=beat, daemon=True).start()
    time.sleep(float(os.environ.get("STAND_IN_SETUP_" + role, "0.3")))  # set-up before the first step (loading, warming up)
    for step in wire.timing_steps(cases, repeats):
        if step == die_at:
            sys.exit(3)
        with open(log, "a") as out:
            out.write(f"{role} ready:{step.replace(' ', ':')} {time.time()} {time.time()}\\n")
        write(wire.READY_FILE, step)
        while not (folder / wire.GO_FILE).exists() or (folder / wire.GO_FILE).read_text() != step:
            time.sleep(0.001)
        began = time.time(); time.sleep(0.06)
        with open(log, "a") as out:
            out.write(f"{role} {step.replace(' ', ':')} {began} {time.time()}\\n")
        write(wire.FINISHED_FILE, step)
    (folder / wire.DONE_FILE).write_text("ok")
    time.sleep(60)
"""
)


def _timers(
    tmp_path: Path,
    cases: int,
    repeats: int,
    die_at: str = "never",
    references: int = 1,
    env_extra: dict[str, str] | None = None,
    candidates: int = 1,
) -> tuple[list[TimerProcess], Path]:
    """Stand-ins named `candidate0..` and `reference1..` (numbered in one sequence), each with its share of rounds."""
    script = tmp_path / "stand_in.py"
    script.write_text(STAND_IN)
    log = tmp_path / "log"
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO), **(env_extra or {})}
    roles = [(wire.CANDIDATE_TIMER, share) for share in rounds_in_turn(repeats, candidates)]
    roles += [(wire.REFERENCE_TIMER, share) for share in rounds_in_turn(repeats, references)]
    timers = []
    for index, (role, share) in enumerate(roles):
        folder = tmp_path / f"{role}{index}"
        folder.mkdir()
        dies = die_at if role == wire.CANDIDATE_TIMER else "never"
        args = [sys.executable, str(script), str(folder), f"{role}{index}", str(cases), str(len(share)), str(log), dies]
        timers.append(TimerProcess(role, folder, args, env, hide=()))
    return timers, log


def _run(timers: list[TimerProcess], cases: int, repeats: int) -> dict[str, float]:
    for timer in timers:
        start_timer(timer, timeout_s=30, memory_mb=4096, deadline=time.monotonic() + 60)
    try:
        seconds = conduct(timers, cases, repeats)
        wait_until_done(timers)
    finally:
        stop_all(timers)
    return seconds


def test_one_process_at_a_time_alternating_and_the_candidate_stopped_while_the_reference_works(tmp_path):
    timers, log = _timers(tmp_path, cases=2, repeats=3)
    _run(timers, cases=2, repeats=3)
    entries = [line.split() for line in log.read_text().splitlines() if " ready:" not in line]
    spans = sorted((float(began), float(ended), role, step) for role, step, began, ended in entries)
    assert len(spans) == 2 * 2 * (3 + 1)  # two processes, two cases, three rounds and the post step each
    for (_, first_end, *_), (second_start, *_) in zip(spans, spans[1:], strict=False):
        assert second_start >= first_end, "two timing processes worked at the same time"
    order = [(step, role) for _, _, role, step in spans]
    firsts = {step: role for step, role in reversed(order)}  # the role that went first at each step
    assert firsts["0:0"] == firsts["0:2"] == firsts["1:0"] == "reference1"
    assert firsts["0:1"] == firsts["1:1"] == "candidate0"
    beats = [float(t) for t in (tmp_path / "candidate0" / "heartbeat").read_text().split()]
    reference_spans = [(began, ended) for began, ended, role, _ in spans if role.startswith(wire.REFERENCE_TIMER)]
    assert beats, "the candidate's stand-in never ran"
    # Stopped with its whole group while the reference works: no heartbeat inside a reference step (20 ms of
    # slack at each end for the signal to land and the step's timestamps to be taken).
    inside = [b for b in beats for began, ended in reference_spans if began + 0.02 < b < ended - 0.02]
    assert not inside, f"the candidate's process ran during a reference step: {inside[:3]}"


def test_a_timing_process_that_ends_early_is_named_with_the_step_it_never_reached(tmp_path):
    timers, _ = _timers(tmp_path, cases=1, repeats=3, die_at="0 1")
    with pytest.raises(TimerFailed) as failure:
        _run(timers, cases=1, repeats=3)
    assert failure.value.timer.role == wire.CANDIDATE_TIMER and failure.value.waited_for == "0 1"
    assert all(not timer.running for timer in timers)


def test_the_conductor_says_where_the_processes_time_went(tmp_path):
    timers, _ = _timers(tmp_path, cases=2, repeats=3)
    seconds = _run(timers, cases=2, repeats=3)
    # Each stand-in sleeps 0.3 s before its first step and 0.06 s in each step; one process at a time.
    assert seconds["setup"] >= 0.3
    assert seconds["rounds"] >= 2 * 2 * 3 * 0.06
    assert seconds["post"] >= 2 * 2 * 0.06
    assert seconds["post"] < seconds["rounds"]


def test_reference_processes_take_the_rounds_in_turn_each_counting_its_own(tmp_path):
    """Three rounds over two reference processes: the first takes rounds 0 and 2 (its own 0 and 1), the second
    round 1 (its own 0); each round is the candidate's and one reference process's, one at a time, alternating which
    goes first, and every process does each case's post step."""
    timers, log = _timers(tmp_path, cases=1, repeats=3, references=2)
    _run(timers, cases=1, repeats=3)
    lines = [line.split() for line in log.read_text().splitlines() if " ready:" not in line]
    entries = sorted((float(began), role, step) for role, step, began, _ in lines)
    assert [(role, step) for _, role, step in entries] == [
        ("reference1", "0:0"),
        ("candidate0", "0:0"),
        ("candidate0", "0:1"),
        ("reference2", "0:0"),
        ("reference1", "0:1"),
        ("candidate0", "0:2"),
        ("candidate0", "0:post"),
        ("reference1", "0:post"),
        ("reference2", "0:post"),
    ]
    assert rounds_in_turn(5, 3) == [[0, 3], [1, 4], [2]]


def test_reference_processes_alone_are_conducted_one_round_each(tmp_path):
    """No candidate process (the judge choosing among independent compiles of torch.compile's baseline): three
    reference processes take one round each, one at a time, then the post step."""
    timers, log = _timers(tmp_path, cases=1, repeats=3, references=3, candidates=0)
    _run(timers, cases=1, repeats=3)
    lines = [line.split() for line in log.read_text().splitlines() if " ready:" not in line]
    entries = sorted((float(began), role, step) for role, step, began, _ in lines)
    assert [(role, step) for _, role, step in entries] == [
        ("reference0", "0:0"),
        ("reference1", "0:0"),
        ("reference2", "0:0"),
        ("reference0", "0:post"),
        ("reference1", "0:post"),
        ("reference2", "0:post"),
    ]


def test_no_round_of_a_case_starts_before_every_process_is_ready_for_it(tmp_path):
    """A reference process still warming up (here 1.5 s of set-up) must not warm up beside another's timed round: the
    case's first round waits for it, though it takes none of the first rounds itself."""
    timers, log = _timers(tmp_path, cases=1, repeats=3, references=2, env_extra={"STAND_IN_SETUP_reference2": "1.5"})
    _run(timers, cases=1, repeats=3)
    lines = [line.split() for line in log.read_text().splitlines()]
    late_ready = next(float(t) for role, step, t, _ in lines if role == "reference2" and step == "ready:0:0")
    first_round = min(float(t) for _, step, t, _ in lines if not step.startswith("ready:"))
    assert first_round >= late_ready


def test_candidate_and_reference_processes_both_take_the_rounds_in_turn(tmp_path):
    """Five rounds over two candidate processes and three reference processes: round g is candidate g % 2's and
    reference g % 3's, each counting its own rounds; while a process works, every candidate process is stopped."""
    timers, log = _timers(tmp_path, cases=1, repeats=5, references=3, candidates=2)
    _run(timers, cases=1, repeats=5)
    lines = [line.split() for line in log.read_text().splitlines() if " ready:" not in line]
    rounds = [
        (role, step)
        for _, role, step in sorted((float(t), role, step) for role, step, t, _ in lines)
        if not step.endswith("post")
    ]
    assert rounds == [
        ("reference2", "0:0"),
        ("candidate0", "0:0"),
        ("candidate1", "0:0"),
        ("reference3", "0:0"),
        ("reference4", "0:0"),
        ("candidate0", "0:1"),
        ("candidate1", "0:1"),
        ("reference2", "0:1"),
        ("reference3", "0:1"),
        ("candidate0", "0:2"),
    ]
    assert sum(step.endswith("post") for _, step, _, _ in lines) == 5


def test_the_sm_clock_is_read_while_each_process_works_and_filed_under_its_round(tmp_path):
    """A reading per poll while a process works on a round, filed under that round and the process's role: with a
    clock that counts up, the process that went first in a round (the reference in even rounds, the candidate in
    odd ones) holds only lower readings than the one after it, and later rounds only higher ones."""
    from ferret.gate.sm_clock import RoundClocks

    ticks = iter(range(1, 1_000_000))
    clocks = RoundClocks(read=lambda: next(ticks))
    timers, _ = _timers(tmp_path, cases=1, repeats=3)
    for timer in timers:
        start_timer(timer, timeout_s=30, memory_mb=4096, deadline=time.monotonic() + 60)
    try:
        conduct(timers, 1, 3, clocks=clocks)
        wait_until_done(timers)
    finally:
        stop_all(timers)
    candidate, reference = clocks.of(0, wire.CANDIDATE_TIMER), clocks.of(0, wire.REFERENCE_TIMER)
    assert len(candidate) == len(reference) == 3
    assert all(low <= high for low, high in candidate + reference)
    assert reference[0][1] < candidate[0][0] and candidate[1][1] < reference[1][0] and reference[2][1] < candidate[2][0]
    assert candidate[0][1] < candidate[1][0] < candidate[2][0]


def test_the_sm_clock_is_read_at_most_every_ten_milliseconds_however_often_the_judge_polls(tmp_path):
    """NVML's queries cost the judge's host time beside a timed round: a reading per CLOCK_EVERY_S, not per poll."""
    from ferret.gate import interleave
    from ferret.gate.sm_clock import RoundClocks

    reads = []
    clocks = RoundClocks(read=lambda: reads.append(1) or 1980)
    timer = TimerProcess(wire.CANDIDATE_TIMER, tmp_path, [], {}, hide=())
    poll = interleave._clock_round(clocks, 0, 0, timer)
    began = time.monotonic()
    for _ in range(200):
        poll()
    elapsed = time.monotonic() - began
    assert 1 <= len(reads) <= 1 + elapsed / interleave.CLOCK_EVERY_S
    time.sleep(interleave.CLOCK_EVERY_S)
    poll()
    assert len(reads) >= 2 and clocks.of(0, wire.CANDIDATE_TIMER) == [[1980, 1980]]
