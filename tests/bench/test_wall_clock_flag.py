"""The wall-clock guard against work hidden from the events (`ferret.bench.process.wall_clock_flag`, docs/cheats.md 13),
with a scripted clock: a GPU whose synchronize waits for the hidden work queued so far, and a host whose calls take
as long as the scenario says. Hidden work must be named in every try; another process's load on the host or the
GPU, which comes and goes, must not be (an honest rmsnorm was once rejected while three pytest
workers shared one H200). Time is virtual (the guard's `time.perf_counter` reads it): a CI host's own load cannot change what the
scenarios measure (busy waits on the real clock read 228 us for a 70 us call under two test workers)."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from ferret.bench import process
from ferret.bench.process import WALL_TRIES, wall_clock_flag


class VirtualTime:
    """`perf_counter` for the guard: seconds that pass only when a scripted call or synchronize says so; every other
    attribute is the time module's."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def perf_counter(self) -> float:
        return self.seconds

    def pass_ms(self, ms: float) -> None:
        self.seconds += ms / 1e3

    def __getattr__(self, name: str):
        return getattr(time, name)


@pytest.fixture(autouse=True)
def virtual_time(monkeypatch) -> VirtualTime:
    clock = VirtualTime()
    monkeypatch.setattr(process, "time", clock)
    return clock


def _now() -> VirtualTime:
    return process.time  # type: ignore[return-value]  # the fixture's virtual time


class ScriptedCandidate:
    """A call that takes `host_ms_of(call number)` of host time and leaves `hidden_ms` of work the events miss."""

    def __init__(self, host_ms_of: Callable[[int], float], hidden_ms: float = 0.0):
        self.host_ms_of, self.hidden_ms = host_ms_of, hidden_ms
        self.calls, self.pending_ms = 0, 0.0

    def call(self) -> None:
        _now().pass_ms(self.host_ms_of(self.calls))
        self.calls += 1
        self.pending_ms += self.hidden_ms


class ScriptedGpu:
    """`sync` waits out the candidate's pending hidden work, plus `busy_ms_of(sync number)` of another process's
    kernels; `host_ms` measures the call as `Clock.host_ms` does (median of 7 calls)."""

    on_gpu = True

    def __init__(self, candidate: ScriptedCandidate, busy_ms_of: Callable[[int], float] = lambda _: 0.0):
        self.candidate, self.busy_ms_of, self.syncs = candidate, busy_ms_of, 0

    def sync(self) -> None:
        _now().pass_ms(self.candidate.pending_ms + self.busy_ms_of(self.syncs))
        self.candidate.pending_ms, self.syncs = 0.0, self.syncs + 1

    def host_ms(self, fn: Callable[[], object], calls: int = 7) -> float:
        per_call = []
        for _ in range(calls):
            started = _now().perf_counter()
            fn()
            per_call.append((_now().perf_counter() - started) * 1e3)
        self.candidate.pending_ms = 0.0  # the real clock holds the GPU meanwhile; the work is done by its sync
        return sorted(per_call)[calls // 2]


EVENT_MS, HOST_MS = 0.034, 0.07  # that honest rmsnorm: event 33.9 us, host launch 70.2 us


def test_work_hidden_on_a_side_stream_is_named_in_every_try():
    candidate = ScriptedCandidate(lambda _: 0.01, hidden_ms=0.3)
    clock = ScriptedGpu(candidate)
    wall_ms, flags = wall_clock_flag(candidate, clock, EVENT_MS, HOST_MS)  # type: ignore[arg-type]
    assert len(flags) == 1 and flags[0].startswith("side_stream_or_thread:"), flags
    assert f"each of {WALL_TRIES} tries" in flags[0]
    assert wall_ms > 0.3


def test_a_host_slowed_by_other_processes_for_the_whole_check_is_not_hidden_work():
    """The host launch time was measured at 0.07 ms when the host was quiet; every call now takes 0.2 ms of host
    time, so the wall time is 0.2 ms: the tries after the first measure the host again and see why."""
    candidate = ScriptedCandidate(lambda _: 0.2)
    wall_ms, flags = wall_clock_flag(candidate, ScriptedGpu(candidate), EVENT_MS, HOST_MS)  # type: ignore[arg-type]
    assert flags == [] and wall_ms > 0.15


def test_another_process_on_the_gpu_for_one_try_is_not_hidden_work():
    """Another process's kernels hold the first try's final synchronize for 30 ms; the second try is quiet."""
    candidate = ScriptedCandidate(lambda _: HOST_MS)
    clock = ScriptedGpu(candidate, busy_ms_of=lambda sync: 30.0 if sync == 1 else 0.0)
    wall_ms, flags = wall_clock_flag(candidate, clock, EVENT_MS, HOST_MS)  # type: ignore[arg-type]
    assert flags == [] and wall_ms < 1.5 * HOST_MS + 0.05
    assert clock.syncs == 4  # two tries of two synchronizes each: the second try decided


def test_hidden_work_under_the_host_launch_time_is_not_named():
    """A launch-bound call's wall time is its host time: work hidden under 1.5x the host time is not named here
    (the floor and the thread count are the other guards)."""
    candidate = ScriptedCandidate(lambda _: 0.2, hidden_ms=0.05)
    _, flags = wall_clock_flag(candidate, ScriptedGpu(candidate), EVENT_MS, 0.2)  # type: ignore[arg-type]
    assert flags == []


def test_only_the_gpu_clock_names_hidden_work():
    candidate = ScriptedCandidate(lambda _: 0.01, hidden_ms=0.3)
    clock = ScriptedGpu(candidate)
    clock.on_gpu = False
    _, flags = wall_clock_flag(candidate, clock, EVENT_MS, None)  # type: ignore[arg-type]
    assert flags == [] and clock.syncs == 2  # one try
