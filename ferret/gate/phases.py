"""Where a check's seconds go: a clock the judge runs through its phases, read into `Verdict.phases`.

    clock = PhaseClock()
    with clock.phase("static_scan"):
        ...
    clock.add("run:correctness", 4.2)      # measured elsewhere (the candidate's process, from its progress)
    verdict.phases = clock.phases()         # in the order first seen, a name's times summed

Wall-clock seconds in the judge's process (`time.perf_counter`), never a time the candidate's process
reports about itself. The phases follow one another, except `timing_inputs`: the judge draws the timed inputs and
starts the timing processes in a thread beside `fresh_draw` and the candidate's run, and `timing_start_wait` is
how long the check then waited for that thread. A `compare:<part>` phase is the wall time of its variants,
compared a few at a time."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from ferret.gate.models import PhaseTime
from ferret.progress import Reporter


class PhaseClock:
    def __init__(self) -> None:
        self._seconds: dict[str, float] = {}
        self._lock = threading.Lock()  # the timing processes are started in a thread beside the judge's main one

    def add(self, name: str, seconds: float) -> None:
        with self._lock:
            self._seconds[name] = self._seconds.get(name, 0.0) + max(seconds, 0.0)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - started)

    def phases(self) -> list[PhaseTime]:
        with self._lock:
            return [PhaseTime(name=name, seconds=round(seconds, 4)) for name, seconds in self._seconds.items()]


class TimingPhases(Reporter):
    """A reporter for the judge's timing (`ferret.gate.timing.time_candidate`) that passes everything on and
    reads its steps as phase boundaries: until its first line the judge draws the input pools
    (`timing_inputs`); from the timing process's first step to its last it runs (`timing_process`); after
    it, the judge checks the timed answers against the reference (`timed_answers`). Call `close_at_end()`
    when time_candidate has returned; without the steps (an early return) it is all `timing_inputs`. The judge
    draws the pools earlier (`ferret.gate.timing.start_timing`, its own `timing_inputs` phase) and passes
    `first="timing_process"`: then everything until the last step is the timing processes'."""

    def __init__(self, inner: Reporter, clock: PhaseClock, first: str = "timing_inputs"):
        self.inner = inner
        self.clock = clock
        self._name = first
        self._since = time.perf_counter()

    def _enter(self, name: str) -> None:
        now = time.perf_counter()
        self.clock.add(self._name, now - self._since)
        self._name, self._since = name, now

    def say(self, message: str) -> None:
        self.inner.say(message)

    def step(self, task: str, done: int, total: int, label: str = "") -> None:
        if task == "timing" and self._name == "timing_inputs":
            self._enter("timing_process")
        self.inner.step(task, done, total, label)
        if task == "timing" and done >= total and self._name == "timing_process":
            self._enter("timed_answers")

    def close_at_end(self) -> None:
        self._enter(self._name)
