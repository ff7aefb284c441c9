"""Checks sharing one GPU (ferret/gate/gpu_turns.py): GPU work side by side, timing alone, a waiting timing ahead of
work that arrives after it, a lock given back when its holder dies; and the judge's two users of it (the candidate's
run shared, the timed rounds alone), each with threads standing in for other checks' processes (locks are per open
file, so threads contend like processes)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from types import SimpleNamespace

import pytest

from ferret.gate import judge as judge_module
from ferret.gate.gpu_turns import TURNS_DIR_ENV, GpuTurns, gpu_key
from ferret.gate.judge import Judge
from ferret.gate.models import TimingResult
from ferret.gate.phases import PhaseClock
from ferret.gate.timing import gpu_alone

HOLD_S = 0.4


def _hold(turns: GpuTurns, kind: str, log: list, name: str, entered: threading.Event | None = None) -> None:
    with getattr(turns, kind)():
        log.append((time.perf_counter(), name, "in"))
        if entered is not None:
            entered.set()
        time.sleep(HOLD_S)
        log.append((time.perf_counter(), name, "out"))


def _start(*args) -> threading.Thread:
    thread = threading.Thread(target=_hold, args=args)
    thread.start()
    return thread


def _span(log: list, name: str) -> tuple[float, float]:
    return next(t for t, n, e in log if n == name and e == "in"), next(t for t, n, e in log if n == name and e == "out")


def test_gpu_work_runs_side_by_side(tmp_path):
    turns, log, entered = GpuTurns(tmp_path, "0"), [], threading.Event()
    first = _start(turns, "shared", log, "a", entered)
    entered.wait()
    second = _start(turns, "shared", log, "b")
    first.join(), second.join()
    assert _span(log, "b")[0] < _span(log, "a")[1]  # b was in while a still held it


def test_timing_waits_for_gpu_work_and_work_arriving_later_waits_for_the_timing(tmp_path):
    turns, log, entered = GpuTurns(tmp_path, "0"), [], threading.Event()
    work = _start(turns, "shared", log, "work", entered)
    entered.wait()
    timing = _start(turns, "alone", log, "timing")
    time.sleep(HOLD_S / 4)  # the timing is waiting on the GPU now, holding the turnstile
    late = _start(turns, "shared", log, "late")
    for thread in (work, timing, late):
        thread.join()
    assert _span(log, "timing")[0] >= _span(log, "work")[1]
    assert _span(log, "late")[0] >= _span(log, "timing")[1]


def test_a_dead_holder_holds_no_one_up(tmp_path):
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; from ferret.gate.gpu_turns import GpuTurns\n"
            f"with GpuTurns(Path({str(tmp_path)!r}), '0').alone():\n    print('held', flush=True); time.sleep(600)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    waiting = threading.Thread(target=_hold, args=(GpuTurns(tmp_path, "0"), "alone", log := [], "after"))
    waiting.start()
    time.sleep(HOLD_S)
    assert not log  # held by the live process
    holder.kill()
    holder.wait()
    waiting.join(timeout=10)
    assert [e for _, _, e in log] == ["in", "out"]


def test_each_gpu_has_its_own_lock(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    assert gpu_key() == "3"
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert gpu_key() == "0"
    log, entered = [], threading.Event()
    first = _start(GpuTurns(tmp_path, "0"), "alone", log, "gpu0", entered)
    entered.wait()
    other = _start(GpuTurns(tmp_path, "1"), "alone", log, "gpu1")
    first.join(), other.join()
    assert _span(log, "gpu1")[0] < _span(log, "gpu0")[1]


@pytest.mark.parametrize("device,waits", [("cuda", True), ("cpu", False)])
def test_the_timed_rounds_wait_for_the_gpu_only_on_the_gpu(tmp_path, monkeypatch, device, waits):
    monkeypatch.setenv(TURNS_DIR_ENV, str(tmp_path))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    log, entered, said = [], threading.Event(), []
    work = _start(GpuTurns.for_this_process(), "shared", log, "work", entered)
    entered.wait()
    with gpu_alone(device, said.append) as waited:
        inside = time.perf_counter()
    work.join()
    assert (inside >= _span(log, "work")[1]) is waits
    assert (waited > 0) is waits


def test_the_judges_timing_waits_for_its_turn_outside_the_timed_phases(tmp_path, monkeypatch):
    """The wait for another check's GPU work is its own phase (gpu_turn_timing), not part of timing_process."""
    monkeypatch.setenv(TURNS_DIR_ENV, str(tmp_path))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(judge_module, "finish_timing", lambda task, started, phases: TimingResult(measured=False))
    log, entered, clock = [], threading.Event(), PhaseClock()
    work = _start(GpuTurns.for_this_process(), "shared", log, "work", entered)
    entered.wait()
    judge = SimpleNamespace(device="cuda", task=None)
    Judge._timing(judge, object(), lambda message: None, True, True, time.monotonic() + 60, clock)  # type: ignore[arg-type]
    work.join()
    seconds = {p.name: p.seconds for p in clock.phases()}
    assert seconds["gpu_turn_timing"] > HOLD_S / 2 > seconds["timing_process"]


def test_the_candidates_run_is_held_out_of_another_checks_timing(tmp_path, monkeypatch):
    monkeypatch.setenv(TURNS_DIR_ENV, str(tmp_path))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    log, entered, said, clock = [], threading.Event(), [], PhaseClock()
    timing = _start(GpuTurns.for_this_process(), "alone", log, "timing", entered)
    entered.wait()
    # stand-ins for the judge and its reporter
    with Judge._gpu_shared(SimpleNamespace(device="cuda"), said.append, clock):  # pyright: ignore[reportArgumentType]
        inside = time.perf_counter()
    timing.join()
    assert inside >= _span(log, "timing")[1]
    assert [p.name for p in clock.phases()] == ["gpu_turn_run"]
