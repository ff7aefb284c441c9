"""Where long work reports: lines worth keeping (`say`, or calling the reporter) and the position in a
counted task (`step`: the candidate's variants, the timed cases, the rounds).

One resolver, `as_reporter`, turns what a caller passed into a reporter:
* nothing: `LogReporter`, records on the `ferret` logger (the Python API's default: configure logging,
  e.g. `logging.basicConfig(level=logging.INFO)`, to see them);
* a plain function of one string: it gets the lines, as it always did;
* a `Reporter`: used as it is. The command line uses `ConsoleReporter` (rich): every line carries the
  time since the command started; on a terminal a live bar shows each task's position and elapsed time;
  elsewhere (CI logs, pipes) a heartbeat line says what is still running every `heartbeat_s` seconds.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from rich.progress import TaskID

LOGGER = logging.getLogger("ferret")


class Reporter:
    """Receives progress. Calling a reporter is `say`, so code written for a plain callback still works."""

    def __call__(self, message: str) -> None:
        self.say(message)

    def say(self, message: str) -> None:
        """A line worth keeping in a log."""

    def step(self, task: str, done: int, total: int, label: str = "") -> None:
        """`task` is at `done` of `total`; `label` names what it is on now."""

    def quiet(self) -> Reporter:
        """This reporter without its lines, steps only (a dispatcher's round judges silently but visibly)."""
        return _StepsOnly(self)

    def close(self) -> None:
        """Stop any live display or heartbeat."""


ProgressLike = Reporter | Callable[[str], None] | None


def as_reporter(progress: ProgressLike) -> Reporter:
    if progress is None:
        return LogReporter()
    if isinstance(progress, Reporter):
        return progress
    return _Callback(progress)


class LogReporter(Reporter):
    """Lines at INFO and steps at DEBUG on the `ferret` logger."""

    def say(self, message: str) -> None:
        LOGGER.info(message)

    def step(self, task: str, done: int, total: int, label: str = "") -> None:
        LOGGER.debug("%s %d/%d %s", task, done, total, label)


class _Callback(Reporter):
    def __init__(self, function: Callable[[str], None]):
        self.function = function

    def say(self, message: str) -> None:
        self.function(message)


class _StepsOnly(Reporter):
    def __init__(self, inner: Reporter):
        self.inner = inner

    def step(self, task: str, done: int, total: int, label: str = "") -> None:
        self.inner.step(task, done, total, label)


class ConsoleReporter(Reporter):
    """The command line's reporter, on stderr (stdout carries only the result line)."""

    def __init__(self, stream: TextIO | None = None, heartbeat_s: float = 30.0, live: bool | None = None):
        from rich.console import Console

        self.console = Console(file=stream or sys.stderr, soft_wrap=True, highlight=False, markup=False, emoji=False)
        self.started = time.monotonic()
        self.heartbeat_s = heartbeat_s
        self._lock = threading.RLock()
        self._last_output = self.started
        self._steps: dict[str, tuple[int, int, str, float]] = {}  # task -> (done, total, label, since)
        self._bar = None
        self._bar_tasks: dict[str, TaskID] = {}
        self._live = self.console.is_terminal if live is None else live
        self._stop = threading.Event()
        self._heartbeat: threading.Thread | None = None

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def say(self, message: str) -> None:
        with self._lock:
            self._print(f"ferret [{self.elapsed():6.1f}s] {message}")

    def _print(self, line: str) -> None:
        (self._bar.console if self._bar is not None else self.console).print(line)
        self._last_output = time.monotonic()

    def step(self, task: str, done: int, total: int, label: str = "") -> None:
        with self._lock:
            previous = self._steps.get(task)
            since = previous[3] if previous and previous[0] == done and previous[2] == label else time.monotonic()
            self._steps[task] = (done, total, label, since)
            if done >= total:
                self._steps.pop(task)
            if self._live:
                self._show_on_bar(task, done, total, label)
            elif self._heartbeat is None and self._steps:
                self._heartbeat = threading.Thread(target=self._beat, name="ferret-heartbeat", daemon=True)
                self._heartbeat.start()

    def _show_on_bar(self, task: str, done: int, total: int, label: str) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        if self._bar is None:
            self._bar = Progress(
                SpinnerColumn(),
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("{task.fields[label]}"),
                console=self.console,
                transient=True,
            )
            self._bar.start()
        if task not in self._bar_tasks:
            self._bar_tasks[task] = self._bar.add_task(task, total=total, label=label)
        self._bar.update(self._bar_tasks[task], completed=done, total=total, label=label)
        if done >= total:
            self._bar.remove_task(self._bar_tasks.pop(task))

    def _beat(self) -> None:
        while not self._stop.wait(min(5.0, self.heartbeat_s)):
            with self._lock:
                quiet_for = time.monotonic() - self._last_output
                if not self._steps or quiet_for < self.heartbeat_s:
                    continue
                now = time.monotonic()
                doing = "; ".join(
                    f"{task} {done + 1}/{total} {label} ({now - since:.0f}s on it)".replace("  ", " ")
                    for task, (done, total, label, since) in self._steps.items()
                )
                self._print(f"ferret [{self.elapsed():6.1f}s] still working: {doing}")

    def close(self) -> None:
        self._stop.set()
        with self._lock:
            if self._bar is not None:
                self._bar.stop()
                self._bar = None
