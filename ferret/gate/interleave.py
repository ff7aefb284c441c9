"""The judge's conductor of the timing processes (`ferret.bench.process`): the candidate's timer and the
reference timers run side by side, each isolated like a candidate's process, and the judge lets exactly one
of them work on the GPU at a time, step by step (`ferret.wire.timing_steps`), alternating which goes first
in each round so that slow drifts of the GPU's state fall on both alike.

While another timer works, every candidate's timer is stopped with its whole process group (SIGSTOP): it
cannot launch anything meant to slow the baseline (or another round) down. Work it queued on the GPU before it
stopped, or a process it left outside its group, is what the reference timers' interference probe looks for.
"""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ferret import wire
from ferret.gate.sm_clock import RoundClocks
from ferret.sandbox.launch import ProcessOptions, ProcessOutcome, run_isolated
from ferret.sandbox.view import FolderView


@dataclass
class TimerProcess:
    """One timing process as the judge drives it: its folder, the thread that runs and watches it, how it ended."""

    role: str
    folder: Path
    args: list[str]
    env: dict[str, str]
    hide: Sequence[Path]
    process: subprocess.Popen | None = None
    outcome: ProcessOutcome | None = None
    thread: threading.Thread | None = field(default=None, repr=False)
    # Set when the judge starts conducting: until then the process warms up beside other work (the candidate's
    # correctness run), however long that takes, and only the check's deadline bounds it.
    conducted: threading.Event = field(default_factory=threading.Event, repr=False)
    # Set by stop_all: a process that starts after it (its thread was still setting up) is killed on start.
    stopping: threading.Event = field(default_factory=threading.Event, repr=False)
    # Whether it runs in the sandbox (None: when it names folders to hide), and how it sees its folder: its job's
    # paths are written in those terms, and a path it reports is read through `view` (`FolderView.on_host`).
    confine: bool | None = None
    view: FolderView | None = None

    def read(self, name: str) -> str | None:
        try:
            return (self.folder / name).read_text()
        except OSError:
            return None

    def say_go(self, step: str) -> None:
        wire.write_step(self.folder / wire.GO_FILE, step)

    @property
    def running(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    def signal_group(self, signum: int) -> None:
        if self.process is not None and self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signum)
            except (ProcessLookupError, PermissionError):
                pass


class TimerFailed(Exception):
    """A timing process ended, or stopped moving, before the step the judge waited for."""

    def __init__(self, timer: TimerProcess, waited_for: str):
        self.timer, self.waited_for = timer, waited_for
        super().__init__(f"the {timer.role} timing process ended before step {waited_for!r}")


def start_timer(timer: TimerProcess, timeout_s: float, memory_mb: int, deadline: float | None) -> None:
    """Run `timer` in a thread of its own (run_isolated watches its limits); returns at once. `timeout_s` is the
    longest it may go without finishing a step once `timer.conducted` is set."""

    def remember(process: subprocess.Popen) -> None:
        timer.process = process
        if timer.stopping.is_set():  # stop_all ran before the process existed (see stop_all)
            timer.signal_group(signal.SIGKILL)

    def progress() -> object:
        # Before the judge conducts, every poll counts as progress (the stall clock starts with the first step).
        return timer.read(wire.FINISHED_FILE) if timer.conducted.is_set() else ("warming up", time.monotonic())

    def run() -> None:
        timer.outcome = run_isolated(
            timer.args,
            timer.folder,
            timer.env,
            ProcessOptions(
                timeout_s,
                memory_mb,
                hide=timer.hide,
                confine=timer.confine,
                finished_marker=timer.folder / wire.DONE_FILE,
                deadline=deadline,
                progress_token=progress,
                on_start=remember,
            ),
        )

    timer.thread = threading.Thread(target=run, name=f"ferret-timer-{timer.role}", daemon=True)
    timer.thread.start()


def _wait_for(timer: TimerProcess, name: str, step: str, poll_s: float, on_poll: Callable[[], None] | None = None) -> None:
    while timer.read(name) != step:
        if not timer.running:
            raise TimerFailed(timer, step)
        if on_poll is not None:
            on_poll()
        time.sleep(poll_s)


def rounds_in_turn(repeats: int, processes: int) -> list[list[int]]:
    """Which of a case's `repeats` rounds each of `processes` processes of one role takes: round g goes to process
    g % processes, so every process takes at least one round when processes <= repeats."""
    return [list(range(k, repeats, processes)) for k in range(processes)]


def conduct(
    timers: list[TimerProcess],
    cases: int,
    repeats: int,
    on_step: Callable[[int, str], None] | None = None,
    poll_s: float = 0.002,
    clocks: RoundClocks | None = None,
) -> dict[str, float]:
    """Drive every step of every process, one process at a time; raises TimerFailed when one ends early.
    `timers` holds the candidate's timers and the reference timers (told apart by role). Each round is one
    candidate timer's and one reference timer's: the processes of a role take the rounds in turn
    (`rounds_in_turn`), each counting its own rounds from 0, so that each process carries its fixed part of a short
    call's time into only its share of the rounds. In each round the two alternate which goes first; every process
    does each case's post step, and no round of a case starts before every process is ready for it.

    Returns where the processes' time went, on the judge's clock: `setup` (waiting until the processes are ready
    for a step: starting, loading the pools, warming up, torch.compile of the baseline), `rounds` (the timed
    rounds) and `post` (the checks after each case's rounds). With `clocks`, the GPU's SM clock is read at every poll
    while a process works on a round (`ferret.gate.sm_clock`)."""
    candidates = [t for t in timers if t.role == wire.CANDIDATE_TIMER]
    references = [t for t in timers if t.role != wire.CANDIDATE_TIMER]
    seconds = {"setup": 0.0, "rounds": 0.0, "post": 0.0}
    for case in range(cases):
        # Every process ready for the case first: one still warming up (torch.compile's workers on every core)
        # beside another's timed round made the candidate's host late (a cold rmsnorm decode's rounds spread 13.7%
        # on the H200, 2026-12-01, when only the two working processes were waited for).
        started = time.perf_counter()
        for timer in timers:
            _wait_for(timer, wire.READY_FILE, f"{case} 0", poll_s)
        seconds["setup"] += time.perf_counter() - started
        for round_number in range(repeats):
            if on_step is not None:
                on_step(case, str(round_number))
            pair = [
                (group[round_number % len(group)], f"{case} {round_number // len(group)}")
                for group in (candidates, references)
                if group
            ]  # no candidate: choosing torch.compile's picks
            sampled = functools.partial(_clock_round, clocks, case, round_number) if clocks is not None else None
            _step(pair if round_number % 2 else pair[::-1], timers, seconds, "rounds", poll_s, sampled)
        if on_step is not None:
            on_step(case, "post")
        _step([(timer, f"{case} post") for timer in timers], timers, seconds, "post", poll_s)
    return {name: round(value, 3) for name, value in seconds.items()}


CLOCK_EVERY_S = 0.01  # a round lasts 100 ms or more: ten readings at least, and the judge's host stays quiet


def _clock_round(clocks: RoundClocks, case: int, round_number: int, timer: TimerProcess) -> Callable[[], None]:
    """A poll hook that reads the SM clock (at most every CLOCK_EVERY_S) while `timer` works on the round, and files
    the readings as it goes."""
    samples: list[int | None] = []
    last = [float("-inf")]

    def poll() -> None:
        now = time.monotonic()
        if now - last[0] < CLOCK_EVERY_S:
            return
        last[0] = now
        samples.append(clocks.read())
        clocks.add(case, timer.role, round_number, samples)

    return poll


def _step(
    order: list[tuple[TimerProcess, str]],
    timers: list[TimerProcess],
    seconds: dict[str, float],
    part: str,
    poll_s: float,
    sampled: Callable[[TimerProcess], Callable[[], None]] | None = None,
) -> None:
    """Each (process, its step) in `order`, one at a time, once all of them are ready; every candidate's timer but
    the working one stopped (SIGSTOP, its whole group) meanwhile. `sampled(timer)`: a hook polled while it works."""
    started = time.perf_counter()
    for timer, step in order:
        _wait_for(timer, wire.READY_FILE, step, poll_s)
    ready = time.perf_counter()
    seconds["setup"] += ready - started
    for timer, step in order:
        others = [t for t in timers if t is not timer and t.role == wire.CANDIDATE_TIMER]
        for other in others:
            other.signal_group(signal.SIGSTOP)
        try:
            timer.say_go(step)
            _wait_for(timer, wire.FINISHED_FILE, step, poll_s, sampled(timer) if sampled is not None else None)
        finally:
            for other in others:
                other.signal_group(signal.SIGCONT)
    seconds[part] += time.perf_counter() - ready


def wait_until_done(timers: list[TimerProcess]) -> None:
    for timer in timers:
        if timer.thread is not None:
            timer.thread.join()


def stop_all(timers: list[TimerProcess]) -> None:
    """Stop every timer that is still running (after a failure of the other, or unneeded): its thread kills the
    group. A timer whose process is not started yet is marked first, so that it is killed as it starts (else
    its thread would wait for a judge that has gone)."""
    for timer in timers:
        timer.stopping.set()
        timer.signal_group(signal.SIGCONT)
        timer.signal_group(signal.SIGKILL)
    wait_until_done(timers)
