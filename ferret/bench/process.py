"""A timing process (`python -m ferret.bench.process job.json`): one side of a speed measurement.

Several run per check (the candidate's timers, the reference timers), each in its own process, started by the
judge like a candidate's process (empty folder, scrubbed environment, no gates, no `tasks/`): a candidate's
timer loads the candidate and nothing else, a reference timer the baseline and its torch.compile and never
candidate code, so the denominator of a speedup is out of the candidate's reach. The judge interleaves their
rounds through the step protocol of `ferret.wire` (one process on the GPU at a time; the candidate's processes
are stopped while another works) and checks everything that comes back (`ferret.gate.timing`): these processes
know no right answer, and the candidate's is trusted with nothing.

The clock (`Clock.bench`): before each timed call the L2 is flushed and the GPU is held by a spin kernel at
least as long as the call's host launch time, so the call's launches are all queued before its start event
runs: the events measure the GPU's work, not the Python launch time or the host's scheduling, which made
launch-bound decode cases swing between rounds. Whether that held is checked for every call, not assumed: a
call whose start event had already run when its launches were all queued (the host fell behind the spin) is
late, its time is the host's, and it is dropped; when more than a tenth of a round's calls are late the round
is timed again with a longer spin. Median of the calls kept per round; the synchronized wall time (host time
included) is reported beside it and guards against work hidden from the events.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import os
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import xxhash
from safetensors.torch import load_file, save_file

from ferret import wire
from ferret.bench import graph as graphs
from ferret.bench import guards
from ferret.bench.warmup_turn import WarmUpTurn, timing_job_key
from ferret.sandbox import audit
from ferret.sandbox.buffers import NAN, RANDOM, ZEROS, CallBuffers
from ferret.sandbox.host_watch import HostDataWatch
from ferret.sandbox.interpreter import prepare_interpreter
from ferret.sandbox.runner import hide_harness_modules, neutral_argv, take_settings
from ferret.sandbox.watch import ComputeOpRecorder, HarnessGuard, LaunchRecorder


def load_function(path: str, attr: str, module_name: str) -> Callable[..., Any]:
    """`attr` of the Python file at `path`, loaded as `module_name` (no import path involved)."""
    return getattr(load_module(path, module_name), attr)


def load_module(path: str, module_name: str) -> Any:
    """The Python file at `path`, loaded as `module_name`; `sys.modules` names it while it runs its body."""
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


class CandidateCopies:
    """The candidate's `CODE_COPIES` loaded copies, each under the name `import` would give it (its file's stem, as
    the runner loads it), and `sys.modules` naming the copy that is about to run (`enter`): in production one module
    has that name, so a copy that asked `sys.modules` for itself would otherwise learn it is judged."""

    def __init__(self, path: str, attr: str, copies: int):
        self.name = Path(path).stem
        if self.name in sys.modules:
            raise ImportError(f"cannot load candidate {path}: the module name {self.name!r} is taken")
        self.modules = [load_module(path, self.name) for _ in range(copies)]
        self.entries = [getattr(module, attr) for module in self.modules]
        self.enter(0)

    def enter(self, copy: int) -> None:
        sys.modules[self.name] = self.modules[copy]


def digest(tensors: dict) -> str:
    """xxhash of every output's bytes, in name order."""
    hasher = xxhash.xxh3_128()
    for name in sorted(tensors):
        hasher.update(tensors[name].detach().contiguous().reshape(-1).view(torch.uint8).cpu().numpy().tobytes())
    return hasher.hexdigest()


# Spun on top of what covering the host launch time needs. A short call's time depended on the spin between the flush
# and the call when there was little (measured on an H200): rmsnorm decode's
# candidate read 5.8 us right behind the flush (the probe), 4.84-5.38 us when the host had queued the call only just in
# time (the judge's rounds behind spins of 0-54 us; the probe's rounds with a few late calls read 4.86), and 5.47-5.57 us
# in every probe round behind a spin of 100 us or more (torch.compile 5.92-5.98, eager 44.6-45.0), so a check whose
# rounds got spins of 0-54 us was unstable. Every call now waits at least this long.
SETTLE_MS = 0.1


def spin_before_call_ms(host_ms: float | None, flush_ms: float, max_ms: float) -> float:
    """How long to spin the GPU before a timed call: the flush (already queued) and the spin together must
    outlast 1.5x the call's host launch time, so all of its launches are queued before its start event runs, and
    then `SETTLE_MS` more, so no call starts right behind the flush or right as its last launch is queued.
    None (a call that waits for the GPU) gets no spin: nothing can be queued ahead of a host synchronization."""
    if host_ms is None:
        return 0.0
    return min(max(1.5 * host_ms + 0.02 - flush_ms, 0.0) + SETTLE_MS, max_ms)


@dataclass
class TimedCalls:
    """Calls timed between events behind one spin length: each call's event time (ms), whether its launches were
    all queued before its start event ran (False: late, the events measured the host), and the host's time to
    enqueue it (ms)."""

    ms: list[float]
    queued_ahead: list[bool]
    enqueue_ms: list[float]
    copies: list[int] = field(default_factory=list)  # which loaded copy of the code each call ran (Slots)

    @property
    def late(self) -> int:
        return self.queued_ahead.count(False)

    def kept_ms(self) -> list[float]:
        """The calls measured on the GPU alone; all of them when none was (the round then shows the host)."""
        kept = [ms for ms, ahead in zip(self.ms, self.queued_ahead, strict=True) if ahead]
        return kept or list(self.ms)

    def round_ms(self) -> float:
        """The round's time: the median of the kept calls, per loaded copy of the code, then the mean over copies.
        Each copy sits at its own code address, which sets a fixed part of a short call's time (up to ~0.5 us on
        an H200), so a median across copies would jump between their
        levels, and one copy's level is the process's luck."""
        ahead = self.queued_ahead if any(self.queued_ahead) else [True] * len(self.ms)
        copies = self.copies or [0] * len(self.ms)
        by_copy: dict[int, list[float]] = {}
        for ms, kept, copy in zip(self.ms, ahead, copies, strict=True):
            if kept:
                by_copy.setdefault(copy, []).append(ms)
        return statistics.fmean(statistics.median(times) for times in by_copy.values())


def launch_time_ms(per_call_ms: list[float], hold_ms: float) -> float | None:
    """A call's host launch time from calls enqueued back to back while the GPU was held for `hold_ms`: their
    median, so that one slow call (the first after the process sat waiting for the judge: three calls' mean read
    0.124 ms on the H200 for a call whose whole synchronized wall time was 0.117 ms) does not set it; None when
    together they took half the hold or more (they waited for the GPU).
    It sizes the spin (a late call is caught and timed again) and the wall-clock guard, which names hidden work
    only above 1.5x it: one slow call must not loosen that guard."""
    if sum(per_call_ms) >= 0.5 * hold_ms:
        return None
    return statistics.median(per_call_ms)


# The candidate timer loads the candidate this many times and calls the copies in turn: where a kernel's code sits
# sets a fixed part of a short call's time, different per loaded copy (rope decode's candidate read 5.76 or 6.30 us
# per copy in one process on the H200), and a process that loaded one copy carried its luck into the check.
CODE_COPIES = 4

MAX_LATE_FRACTION = 0.1  # more late calls than this in a round: the round is timed again with a longer spin


def longer_spin_ms(spin_ms: float, calls: TimedCalls, flush_ms: float, max_ms: float) -> float:
    """The spin for another try after too many late calls: at least twice as long, and long enough for the
    slowest enqueue seen (the host was slower than when its launch time was measured), settling time included."""
    needed = spin_before_call_ms(max(calls.enqueue_ms, default=0.0), flush_ms, max_ms)
    return min(max(2 * spin_ms, needed), max_ms)


class Clock:
    """How one implementation is timed. On the GPU: the L2 flushed, the GPU held by a spin kernel so that flush
    and spin outlast the call's host launch time, then the call between two events (its launches all queued
    before its start event runs); median over ~`measure_ms` of calls (10 to MAX_CALLS). On the CPU
    rehearsal: a plain median of three."""

    HOLD_MS = 40.0  # how long the GPU is held while the host launch time is measured
    MAX_SPIN_MS = 10.0
    MAX_CALLS = 300  # per round: a median of hundreds of calls is as steady as one of thousands, and cheaper
    MAX_PROFILED_CALLS = 20  # per round, for `device_ms`
    SPIN_RETRIES = 3  # a round with too many late calls is timed again with a longer spin, at most this often

    def __init__(self, on_gpu: bool, l2_bytes: int = 0, measure_ms: float = 100.0):
        self.on_gpu, self.measure_ms = on_gpu, measure_ms
        self.late_fractions: list[float] = []  # per `bench`: the fraction of its calls dropped as late
        self.spins_ms: list[float] = []  # per `bench` on the GPU: the spin its kept calls were timed behind
        self._calibration: tuple[float, float] | None = None  # (spin cycles per ms, one flush's ms)
        if on_gpu:
            self.flush_buffer = torch.empty(max(256 << 20, 4 * l2_bytes), dtype=torch.int8, device="cuda")
            self._flush_device_ms: float | None = None

    def calibrate(self) -> None:
        """Measure the spin kernel's cycles per ms and one L2 flush's GPU time, now. Done on first need otherwise;
        a timing process calls it when the judge first lets it work alone on the GPU: it starts while the
        candidate's runner may still be using the GPU, and a spin timed beside another process's kernels reads
        slow (its cycles per ms too few, every later spin too short)."""
        self._calibration = (self._spin_cycles_per_ms(), self._measure_flush_ms())

    def _calibrated(self) -> tuple[float, float]:
        if self._calibration is None:
            self.calibrate()
        assert self._calibration is not None
        return self._calibration

    @property
    def cycles_per_ms(self) -> float:
        return self._calibrated()[0]

    @property
    def flush_ms(self) -> float:
        return self._calibrated()[1]

    def sync(self) -> None:
        if self.on_gpu:
            torch.cuda.synchronize()

    @staticmethod
    def _spin_cycles_per_ms() -> float:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(1_000_000)  # the first spin also loads the kernel
        start.record()
        torch.cuda._sleep(20_000_000)
        end.record()
        torch.cuda.synchronize()
        return 20_000_000 / max(start.elapsed_time(end), 1e-3)

    def _measure_flush_ms(self) -> float:
        """GPU time of one L2 flush: it runs before the spin, so it holds the GPU too."""
        times = []
        for _ in range(5):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            self.flush_buffer.zero_()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        return min(times)

    def spin(self, ms: float) -> None:
        if ms > 0:
            torch.cuda._sleep(int(self.cycles_per_ms * ms))

    def host_ms(self, fn: Callable[[], object], calls: int = 7) -> float | None:
        """CPU time to enqueue one call, measured while the GPU is held busy (`launch_time_ms`); None when the call
        waits for the GPU (a host synchronization inside it), where no spin can keep its launches ahead."""
        if not self.on_gpu:
            return None
        self.sync()
        self.spin(self.HOLD_MS)
        per_call = []
        for _ in range(calls):
            started = time.perf_counter()
            fn()
            per_call.append((time.perf_counter() - started) * 1e3)
        self.sync()
        return launch_time_ms(per_call, self.HOLD_MS)

    def bench(self, fn: Callable[[], object], host_ms: float | None, sample: AnswerSample | None = None) -> float:
        """One round's time of `fn`; with `sample`, some of its timed calls are kept for the judge (`AnswerSample`)."""
        if not self.on_gpu:
            times = []
            for _ in range(3):
                if sample is not None:
                    sample.before()
                started = time.perf_counter()
                fn()
                times.append((time.perf_counter() - started) * 1e3)
                if sample is not None:
                    sample.after()
            return statistics.median(times)
        spin_ms = spin_before_call_ms(host_ms, self.flush_ms, self.MAX_SPIN_MS)
        estimate = self._timed_calls(fn, spin_ms, 3, sample).kept_ms()
        calls = max(10, min(self.MAX_CALLS, int(self.measure_ms / max(statistics.median(estimate), 1e-3))))
        timed = self._timed_calls(fn, spin_ms, calls, sample)
        for _ in range(self.SPIN_RETRIES):
            if host_ms is None or timed.late <= MAX_LATE_FRACTION * calls or spin_ms >= self.MAX_SPIN_MS:
                break
            spin_ms = longer_spin_ms(spin_ms, timed, self.flush_ms, self.MAX_SPIN_MS)
            timed = self._timed_calls(fn, spin_ms, calls, sample)
        self.spins_ms.append(spin_ms)
        if host_ms is None:  # a call that waits for the GPU: no spin, nothing can be queued ahead of it
            self.late_fractions.append(0.0)
            return TimedCalls(timed.ms, [True] * calls, timed.enqueue_ms, timed.copies).round_ms()
        self.late_fractions.append(timed.late / calls)
        return timed.round_ms()

    def device_ms(self, fn: Callable[[], object]) -> float:
        """Device time per call of the kernels `fn` launches (torch.profiler's CUPTI records), the L2 flushed
        before each call and the flush's own time taken off. For the reference timer's calls that synchronize
        with the host (a baseline that sizes its work by a value read on the host, as the eager MLA baseline once
        did by `cache_lens.max()`): no spin can queue
        their launches ahead, so events around them also measure the host's launch time between their
        kernels, which swung their rounds by up to 85% on the H200. Their kernels' time is what the GPU
        does, as a queued-ahead call's events measure it. Never used for candidate code."""
        estimate = statistics.median(self._timed_calls(fn, 0.0, 3).ms)
        # Kernel times are steady (the H200's baseline rounds agreed within 0.3%); the profiler's records cost
        # host time per kernel, so fewer calls than the event clock's.
        calls = max(5, min(self.MAX_PROFILED_CALLS, int(self.measure_ms / max(estimate, 1e-3))))
        if self._flush_device_ms is None:
            self._flush_device_ms = sum(device_us_per_kernel(self.flush_buffer.zero_, self, 20).values()) / 1e3

        def flush_then_call() -> None:
            self.flush_buffer.zero_()
            fn()

        total_ms = sum(device_us_per_kernel(flush_then_call, self, calls).values()) / 1e3
        return max(total_ms - self._flush_device_ms, 0.0)

    def _timed_calls(
        self, fn: Callable[[], object], spin_ms: float, calls: int, sample: AnswerSample | None = None
    ) -> TimedCalls:
        """Each call between two events behind the flush and the spin. Right after its end event is queued, the
        start event is asked whether it has run: if it has, the GPU reached the call before the host had queued
        all of it, and the events measured the host (a late call). `sample`'s work goes before the flush and after
        the end event: outside the events."""
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(calls)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(calls)]
        queued_ahead, enqueue_ms, copies = [], [], []
        self.sync()
        for start, end in zip(starts, ends, strict=True):
            if sample is not None:
                sample.before()
            self.flush_buffer.zero_()
            self.spin(spin_ms)
            started = time.perf_counter()
            start.record()
            copy = fn()
            end.record()
            enqueue_ms.append((time.perf_counter() - started) * 1e3)
            queued_ahead.append(not start.query())
            copies.append(copy if isinstance(copy, int) else 0)  # Slots.call says which copy ran; anything else: one
            if sample is not None:
                sample.after()
        self.sync()
        return TimedCalls(
            [start.elapsed_time(end) for start, end in zip(starts, ends, strict=True)], queued_ahead, enqueue_ms, copies
        )


class Slots:
    """Rotating input sets and output buffers for one implementation on one case, and its loaded copies in turn.

    One more output set than input sets: each output buffer meets a different input set every time around,
    so an answer left in a buffer by an earlier call is never the right one for this call; and a different
    input set, at a different address, on every call: nothing to replay. `fn` may be several loaded copies of the
    same code (the candidate timer's `CODE_COPIES`), called in turn; `fn` alone names the first."""

    def __init__(
        self,
        fn: Callable[..., None] | Sequence[Callable[..., None]],
        pool: list[dict],
        fresh_outputs: Callable[[], dict],
        params: dict,
        enter: Callable[[int], None] | None = None,
    ):
        self.enter = enter  # called with the copy about to run (`CandidateCopies.enter`)
        self.copies = list(fn) if isinstance(fn, Sequence) else [fn]
        self.fn, self.pool, self.params = self.copies[0], pool, params
        self.outputs = [fresh_outputs() for _ in range(len(pool) + 1)]
        self.last_input: list[int | None] = [None] * len(self.outputs)
        self.first_input: list[int | None] = [None] * len(self.outputs)
        self.calls = 0

    def upcoming(self) -> tuple[int, int]:
        """(output slot, input set) of the next `call`."""
        return self.calls % len(self.outputs), self.calls % len(self.pool)

    def call(self) -> int:
        """One call; returns which copy ran it (`TimedCalls.round_ms` takes each copy's median)."""
        k = self.calls
        self.calls += 1
        i, j, copy = k % len(self.pool), k % len(self.outputs), k % len(self.copies)
        self._call_into(j, i, copy)
        return copy

    def _call_into(self, j: int, i: int, copy: int) -> None:
        self.last_input[j] = i
        if self.first_input[j] is None:
            self.first_input[j] = i
        if self.enter is not None:
            self.enter(copy)
        self.copies[copy](self.pool[i], self.outputs[j], self.params)

    def end_away_from_first_inputs(self) -> None:
        """One more call into every slot whose last input is the one it first got: a candidate that writes a slot
        once and leaves that answer there afterwards would otherwise pass whenever the number of calls brings each
        slot back to its first input set (with 2 sets, every other count of calls: the CPU rehearsal's lazy
        candidate passed once each process loaded 4 copies)."""
        if len(self.pool) < 2:
            return
        for j, (first, last) in enumerate(zip(self.first_input, self.last_input, strict=True)):
            if first is not None and last == first:
                self._call_into(j, (first + 1) % len(self.pool), j % len(self.copies))


@dataclass
class _Kept:
    """One sampled timed call: the input set it answered, the inputs changed for it (input -> flat positions, the
    values written there) and its answer, copied as the call left it."""

    set_index: int
    changed: dict[str, tuple[torch.Tensor, torch.Tensor]]
    answer: dict[str, torch.Tensor] = field(default_factory=dict)


class AnswerSample:
    """The candidate's timed calls, each on content it has never seen, and a random sample of them kept for the judge.

    Before every call timed between events (ahead of the flush), a few elements of each floating-point read-only input
    of its set (`wire.changed_count` of them, at random positions) trade places, and after its end event they are put
    back: no timed call presents content an earlier one did, yet each is equal to a seen set almost everywhere, so a
    cache keyed on the content never hits, and one keyed on less (a sampled fingerprint, an address, a sum) replays
    the unchanged set's answer, wrong where the elements moved. `SAMPLED_ANSWERS` calls are kept (reservoir sampling
    over every timed call), with their changes; the choice and the positions come from the OS's randomness here, so
    nothing the candidate can read or predict says which calls are kept. The judge checks every kept answer against
    its reference on its own copy of the set, changed the same way (`ferret.gate.answers`)."""

    def __init__(self, slots: Slots, float_read_only: list[str], size: int = wire.SAMPLED_ANSWERS):
        self.slots, self.names, self.size = slots, float_read_only, size
        self.kept: list[_Kept] = []
        self.seen = 0
        self.stale: set[int] = set()  # output slots whose last answer is for changed content (`refresh`)
        self._random = random.SystemRandom()
        self._generators: dict[str, torch.Generator] = {}
        # (reservoir place, output slot, input set, changes, values to put back) of the call under way
        self._now: tuple[int, int, int, dict[str, tuple[torch.Tensor, torch.Tensor]], dict[str, torch.Tensor]] | None = None

    def before(self) -> None:
        """Called before each timed call: its set changed, and whether it is kept decided."""
        self.seen += 1
        place = len(self.kept) if len(self.kept) < self.size else self._random.randrange(self.seen)
        j, i = self.slots.upcoming()
        inputs = self.slots.pool[i]
        changed, put_back = {}, {}
        for name in self.names:
            if inputs[name].is_contiguous() and wire.changed_count(inputs[name].numel()):
                changed[name], put_back[name] = self._change(inputs[name])
        self._now = (place, j, i, changed, put_back)

    def _change(self, tensor: torch.Tensor) -> tuple[tuple[torch.Tensor, torch.Tensor], torch.Tensor]:
        flat = tensor.view(-1)
        device = str(flat.device)
        if device not in self._generators:
            self._generators[device] = torch.Generator(device=flat.device)
            self._generators[device].manual_seed(self._random.getrandbits(63))
        # Distinct positions at random gaps, drawn on the device: no host synchronization between timed calls (a
        # `unique` would wait for the GPU). Gaps of 1 to numel // count wrap around the input at most once.
        numel, count = flat.numel(), wire.changed_count(flat.numel())
        gaps = torch.randint(1, numel // count + 1, (count,), generator=self._generators[device], device=flat.device)
        at = (gaps.cumsum(0) + self._random.randrange(numel)) % numel
        before = flat[at]
        moved = before.roll(1)  # every picked element takes the value of the one before it
        flat[at] = moved
        return (at, moved), before

    def after(self) -> None:
        """Called after each timed call's end event: its set put back, its answer copied if it is kept."""
        if self._now is None:
            return
        place, j, i, changed, put_back = self._now
        self._now = None
        if place < self.size:
            kept = _Kept(i, {n: (at.cpu(), moved.cpu()) for n, (at, moved) in changed.items()})
            kept.answer = {n: t.clone() for n, t in self.slots.outputs[j].items()}
            self.kept[place : place + 1] = [kept]
        for name, (at, _) in changed.items():
            self.slots.pool[i][name].view(-1)[at] = put_back[name]
        self.stale.add(j)

    def refresh(self) -> None:
        """One more call, on content put back, into every output slot whose last answer was for changed content:
        the checks after the rounds (`replay_flags`, the answers left in the slots) compare with the sets as the
        judge made them."""
        for j in sorted(self.stale):
            last = self.slots.last_input[j]
            if last is not None:
                self.slots._call_into(j, last, j % len(self.slots.copies))
        self.stale.clear()

    def tensors(self) -> dict[str, torch.Tensor]:
        """The kept calls for the answers file (`wire.sample_key`)."""
        found = {}
        for m, kept in enumerate(self.kept):
            for name, tensor in kept.answer.items():
                found[wire.sample_key(m, kept.set_index, name)] = tensor.contiguous().cpu()
            for name, (at, moved) in kept.changed.items():
                found[wire.sample_key(m, kept.set_index, wire.CHANGED_AT + name)] = at
                found[wire.sample_key(m, kept.set_index, wire.CHANGED_TO + name)] = moved
        return found


def load_pool(case: wire.TimingCaseJob, device: str) -> list[dict]:
    pool: list[dict] = [{} for _ in range(case.pool_sets)]
    for key, tensor in load_file(case.pool_file).items():
        parsed = wire.parse_pool_key(key)
        if parsed is None:
            raise ValueError(f"{case.pool_file}: {key!r} is not a pool key")
        # A copy in the allocator's memory: load_file's tensors are views of the mapped file, 8-byte aligned, and a
        # kernel that builds TMA descriptors needs the 16-byte aligned bases every caller's allocator gives.
        pool[parsed[0]][parsed[1]] = tensor.to(device, copy=True)
    return pool


def warm_up(slots: dict[str, Slots]) -> str | None:
    """One call of each (compilation and autotuning stay out of the numbers). torch.compile of the baseline
    may fail: it is dropped and its error returned; any other failure propagates."""
    compile_error = None
    for name in list(slots):
        try:
            for _ in slots[name].copies:  # each loaded copy compiles (or loads) its own kernels
                slots[name].call()
        except Exception as err:  # noqa: BLE001 - only torch.compile of the baseline may fail here
            if name != "baseline_compiled":
                raise
            compile_error = f"{type(err).__name__}: {err}"[:300]
            del slots[name]
    return compile_error


class Steps:
    """This process's side of the step protocol (`ferret.wire.timing_steps`): say which step it is ready
    for, wait for the judge's go, say when it is done. The judge runs one process's step at a time."""

    def __init__(self, folder: Path, poll_s: float = 0.002):
        self.folder, self.poll_s = folder, poll_s

    def ready(self, step: str) -> None:
        wire.write_step(self.folder / wire.READY_FILE, step)
        go = self.folder / wire.GO_FILE
        while True:
            try:
                if go.read_text() == step:
                    return
            except OSError:
                pass
            time.sleep(self.poll_s)

    def finished(self, step: str) -> None:
        wire.write_step(self.folder / wire.FINISHED_FILE, step)


# Hidden work shows in every try; another process's load on the host or the GPU (pytest workers sharing one H200 made
# an honest, launch-bound rmsnorm read 114.5 us of wall time against 70.2 us of host time) comes and goes.
WALL_TRIES = 3


def synchronized_wall_ms(candidate: Slots, clock: Clock, event_ms: float) -> float:
    """Wall time per call over ~20 ms of calls, with a device-wide synchronize before the clock stops: work
    hidden on a side stream or in a thread shows up here even if the events missed it."""
    calls = max(10, min(200, int(20.0 / max(event_ms, 1e-3))))
    clock.sync()
    started = time.perf_counter()
    for _ in range(calls):
        candidate.call()
    clock.sync()
    return (time.perf_counter() - started) * 1e3 / calls


def hides_work(event_ms: float, wall_ms: float, host_ms: float | None) -> bool:
    """Wall time more than twice the event time, by more than 50 us, and more than 1.5x the host launch time: a
    call's own launch time is no hidden work (a launch-bound call's wall time is its host time)."""
    return event_ms < 0.5 * wall_ms and wall_ms - event_ms > 0.05 and wall_ms > 1.5 * (host_ms or 0.0)


def wall_clock_flag(candidate: Slots, clock: Clock, event_ms: float, host_ms: float | None) -> tuple[float, list[str]]:
    """The candidate's synchronized wall time per call, and `side_stream_or_thread` when it hides work from the
    events in each of `WALL_TRIES` tries. A try after the first measures the host launch time again first (with
    the GPU held, as `Clock.host_ms`) and takes the larger of it and `host_ms`: a host slowed by another process
    since `host_ms` was measured slows the wall time too. Only flagged on the GPU."""
    tries: list[tuple[float, float | None]] = []
    for attempt in range(WALL_TRIES if clock.on_gpu else 1):
        host = host_ms if attempt == 0 else max(host_ms or 0.0, clock.host_ms(candidate.call) or 0.0)
        wall_ms = synchronized_wall_ms(candidate, clock, event_ms)
        tries.append((wall_ms, host))
        if not (clock.on_gpu and hides_work(event_ms, wall_ms, host)):
            return wall_ms, []
    seen = "; ".join(f"wall {wall * 1e3:.1f} us against host {(host or 0.0) * 1e3:.1f} us" for wall, host in tries)
    return min(wall for wall, _ in tries), [
        f"side_stream_or_thread: event time {event_ms * 1e3:.1f} us, but synchronized wall time above 2x the event "
        f"time and 1.5x the host launch time per call in each of {len(tries)} tries ({seen})"
    ]


def replay_flags(candidate: Slots, fresh_outputs: Callable[[], dict], clock: Clock) -> list[str]:
    """Every output slot's answer, fingerprinted now, must be what a synchronous call on the same inputs gives."""
    replayed = []
    for j, i in enumerate(candidate.last_input):
        if i is None:
            continue
        seen = digest(candidate.outputs[j])
        check = fresh_outputs()
        if candidate.enter is not None:
            candidate.enter(0)
        candidate.fn(candidate.pool[i], check, candidate.params)
        clock.sync()
        if digest(check) != seen:
            replayed.append(j)
    if replayed:
        return [
            f"cross_call_caching: outputs of timed calls {replayed[:8]} differ from a synchronous call on the "
            "same inputs (work deferred, batched across calls, or answers replayed)"
        ]
    return []


def save_answers(candidate: Slots, float_read_only: list[str], path: Path, sample: AnswerSample | None = None) -> None:
    """Nothing here knows the right answers (the candidate shares this process): every timed call's answer, as
    it was left in its output buffer, goes to the judge with the input set it answered, and so do the answers of
    the sampled timed calls (`AnswerSample`) with the inputs changed for them."""
    pool = candidate.pool
    answers = {wire.pool_key(i, n): pool[i][n].contiguous().cpu() for i in range(len(pool)) for n in float_read_only}
    for j, i in enumerate(candidate.last_input):
        if i is not None:
            answers.update({wire.slot_key(j, i, n): t.contiguous().cpu() for n, t in candidate.outputs[j].items()})
    if sample is not None:
        answers.update(sample.tensors())
    save_file(answers, str(path))


def device_us_per_kernel(work: Callable[[], object], clock: Clock, calls: int) -> dict[str, float]:
    """Device microseconds per call of `work`, kernel by kernel (and copy by copy), from torch.profiler's
    CUDA records; the operator-level and runtime-API records, which repeat or carry no device time, left out."""
    from torch.profiler import ProfilerActivity, profile

    clock.sync()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            work()
        clock.sync()
    totals: dict[str, float] = {}
    for event in prof.key_averages():
        device_us = float(getattr(event, "device_time_total", 0.0) or 0.0)
        if device_us and not event.key.startswith(("aten::", "cuda", "ProfilerStep")):
            totals[event.key[:120]] = totals.get(event.key[:120], 0.0) + device_us / calls
    return totals


def executed_kernels(work: Callable[[], object], clock: Clock, calls: int) -> dict[str, int]:
    """How often each kernel ran on the GPU during `calls` calls of `work`: the profiler's CUDA records (CUPTI sees
    every kernel of the process, whoever launched it), by the names it gives them; as `device_us_per_kernel` reads
    them, the operator-level and runtime-API records left out."""
    from torch.profiler import ProfilerActivity, profile

    clock.sync()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            work()
        clock.sync()
    skipped = ("aten::", "cuda", "ProfilerStep")
    return {
        event.key: int(event.count)
        for event in prof.key_averages()
        if float(getattr(event, "device_time_total", 0.0) or 0.0) and not event.key.startswith(skipped)
    }


def torch_compute_flags(call: Callable[[], object], calls: int = 3) -> list[str]:
    """`library_call` when PyTorch computed floating-point results during `calls` of the candidate's calls in the
    timer (the runner's ATen watch, `ComputeOpRecorder`, sees only each variant's first call): torch's own kernels
    pass the profiler's account (`foreign_kernel_flags`), so a candidate that hands its math to torch once it
    is timed is named here."""
    recorder = ComputeOpRecorder()
    with recorder:
        for _ in range(calls):
            call()
    if not recorder.flagged:
        return []
    ops = ", ".join(f"{name} x{count}" for name, count in sorted(recorder.flagged.items())[:8])
    return [f"library_call: PyTorch computed floating-point results during {calls} of the candidate's timed calls: {ops}"]


def host_numerics_flags(call: Callable[[], object], candidate: str, on_gpu: bool, calls: int = 3) -> list[str]:
    """`host_numerics` when the candidate's own code took floating-point data to the host during `calls` of its calls
    in the timer (the runner's watch, `HostDataWatch`, sees only each variant's first call)."""
    watch = HostDataWatch(candidate, on_gpu=on_gpu)
    with watch:
        for _ in range(calls):
            call()
    if not watch.seen:
        return []
    where = ", ".join(f"{what} x{count}" for what, count in sorted(watch.seen.items())[:8])
    return [
        f"host_numerics: the candidate's code took floating-point data to the host during {calls} of its timed calls: {where}"
    ]


def foreign_kernel_flags(call: Callable[[], object], clock: Clock, launches: LaunchRecorder, calls: int = 5) -> list[str]:
    """`library_call` when kernels ran during the candidate's calls that its counted launches and torch's own kernels
    do not account for (`guards.foreign_kernels`): compute by a library reached around the launch counter."""
    before = dict(launches.counts)
    executed = executed_kernels(call, clock, calls)
    launched = {name: count - before.get(name, 0) for name, count in launches.counts.items() if count > before.get(name, 0)}
    foreign = guards.foreign_kernels(executed, launched)
    if not foreign:
        return []
    named = ", ".join(f"{name[:100]} x{count}" for name, count in sorted(foreign.items())[:8])
    return [
        f"library_call: over {calls} calls, kernels ran that the candidate's launches do not account for (nor are "
        f"torch's own): {named}"
    ]


def kernel_breakdown(call: Callable[[], object], clock: Clock, calls: int = 10) -> dict[str, float]:
    """Device microseconds per call of each kernel the call launches (torch.profiler, L2 flushed before each
    call; the flush's own kernels left out). Kernel names are the candidate's text: they inform an optimizer,
    they never decide anything."""
    flush_only = device_us_per_kernel(clock.flush_buffer.zero_, clock, calls)

    def flush_then_call() -> None:
        clock.flush_buffer.zero_()
        call()

    kernels = {k: v for k, v in device_us_per_kernel(flush_then_call, clock, calls).items() if k not in flush_only}
    return dict(sorted(kernels.items(), key=lambda item: -item[1])[:20])


@dataclass
class _CaseState:
    """What a timing process holds for one case between its steps."""

    case: wire.TimingCaseJob
    number: int
    slots: dict[str, Slots]
    fresh_outputs: Callable[[], dict]
    buffers: list[tuple[CallBuffers, dict]]  # every output set handed out, guarded, with the dict holding it
    float_read_only: list[str]
    host_ms: dict[str, float | None]
    result: wire.TimingCaseResult
    sample: AnswerSample | None = None  # the candidate's timed calls kept for the judge


def _timed(seconds: dict[str, float], part: str, work: Callable[[], Any]) -> Any:
    """`work()`, its seconds added to `seconds[part]` (`TimingCaseResult.seconds`: where a check's time goes)."""
    started = time.perf_counter()
    try:
        return work()
    finally:
        seconds[part] = round(seconds.get(part, 0.0) + time.perf_counter() - started, 4)


def _slots(fn: Any, pool: list[dict], fresh_outputs: Callable[[], dict], params: dict) -> Slots:
    if isinstance(fn, CandidateCopies):
        return Slots(fn.entries, pool, fresh_outputs, params, enter=fn.enter)
    return Slots(fn, pool, fresh_outputs, params)


def prepare_case(job: wire.TimingJob, case: wire.TimingCaseJob, number: int, implementations: dict, clock: Clock) -> _CaseState:
    """Load the case's pool, make the output slots and warm every implementation up (compiling it): work that
    may overlap other processes' (`measure_host_times` comes in the case's first step)."""
    device = job.device
    seconds: dict[str, float] = {}
    pool = _timed(seconds, "pool", lambda: load_pool(case, device))

    made: list[tuple[CallBuffers, dict]] = []

    def fresh_outputs() -> dict:
        """A guarded output set, pre-filled in turn with NaN, random values and zeros (then with the stale answer
        of another input set, once the slots have gone round)."""
        buffers = CallBuffers(device)
        how = SLOT_PREFILLS[len(made) % len(SLOT_PREFILLS)]
        outputs = {name: buffers.output(name, shape, dtype, how) for name, (shape, dtype) in case.outputs.items()}
        made.append((buffers, outputs))
        return outputs

    slots = {name: _slots(fn, pool, fresh_outputs, job.params) for name, fn in implementations.items()}
    compile_error = _timed(seconds, "warm_up", lambda: warm_up(slots))
    l2_state = guards.reset_persisting_l2() if clock.on_gpu else "not applicable on the CPU"
    result = wire.TimingCaseResult(
        case=case.case,
        samples={k: [] for k in slots},
        host_ms={},
        pool_sets=len(pool),
        persisting_l2=l2_state,
        flags=[],
        compile_error=compile_error,
        seconds=seconds,
    )
    float_read_only = [n for n in job.read_only if pool[0][n].is_floating_point()]
    sample = AnswerSample(slots["candidate"], float_read_only) if "candidate" in slots else None
    return _CaseState(case, number, slots, fresh_outputs, made, float_read_only, result.host_ms, result, sample)


SLOT_PREFILLS = (NAN, RANDOM, ZEROS)


def buffer_flags(state: _CaseState) -> list[str]:
    """`output_relabelled` for an output slot re-pointed or re-labelled in place, `write_outside_outputs` for guard
    bytes around a slot that changed, over every call the candidate made in this process on this case."""
    relabelled = [change for buffers, outputs in state.buffers for change in buffers.relabelled({}, outputs)]
    outside = [change for buffers, _ in state.buffers for change in buffers.writes_outside()]
    flags = []
    if relabelled:
        flags.append(f"output_relabelled: output slots re-pointed or re-labelled in place: {'; '.join(relabelled)[:500]}")
    if outside:
        flags.append(f"write_outside_outputs: guard bytes around output slots changed: {'; '.join(outside)[:500]}")
    return flags


def warm_up_ahead(job: wire.TimingJob, implementations: dict, clock: Clock) -> None:
    """Every case after the first warmed up now (its pool loaded, each implementation called once, compiling it),
    then let go: the judge starts this process beside the candidate's correctness run, and compiling here
    overlaps it, where compiling at the case's turn would hold both processes up between cases. Each case's pool is
    loaded again at its turn (one case's pool at a time in memory)."""
    for number, case in enumerate(job.cases[1:], start=1):
        prepare_case(job, case, number, implementations, clock)


def measure_host_times(state: _CaseState, clock: Clock) -> None:
    """Each implementation's host launch time, which sizes its spin. Measured in the case's first step, when the
    judge lets this process alone on the GPU: the process may have warmed up beside the candidate's runner."""
    state.host_ms.update(
        _timed(state.result.seconds, "host_time", lambda: {name: clock.host_ms(slot.call) for name, slot in state.slots.items()})
    )


def time_round(state: _CaseState, clock: Clock, probe: Callable[[], float] | None, reference: bool = False) -> None:
    """One round: every implementation of this process timed once (the reference timer probes the GPU for
    interference before and after). The reference timer's calls that synchronize with the host are timed by
    their kernels' device time (`Clock.device_ms`); everything else, the candidate always, by events."""
    if probe is not None:
        state.result.probes_ms.append(probe())
    for name, slot in state.slots.items():
        if clock.on_gpu:
            guards.reset_persisting_l2()
        if reference and clock.on_gpu and state.host_ms[name] is None:
            state.result.samples[name].append(clock.device_ms(slot.call))
        else:
            kept = state.sample if name == "candidate" else None
            state.result.samples[name].append(clock.bench(slot.call, state.host_ms[name], kept))
            if clock.on_gpu:
                state.result.late_fraction.setdefault(name, []).append(round(clock.late_fractions[-1], 4))
                state.result.spin_ms.setdefault(name, []).append(round(clock.spins_ms[-1], 4))
    if probe is not None:
        state.result.probes_ms.append(probe())


def check_candidate_calls(
    job: wire.TimingJob, state: _CaseState, clock: Clock, harness: HarnessGuard, sandbox: audit.Sandbox | None = None
) -> None:
    """After the rounds: the candidate's wall time, replayed answers, timed answers saved for the judge, its
    kernels, the harness functions it must not have replaced, and anything the sandbox refused it."""
    candidate, seconds = state.slots["candidate"], state.result.seconds
    event_ms = statistics.median(state.result.samples["candidate"])
    state.result.wall_ms, flags = _timed(
        seconds, "wall", lambda: wall_clock_flag(candidate, clock, event_ms, state.host_ms["candidate"])
    )
    if state.sample is not None:
        state.sample.refresh()
    candidate.end_away_from_first_inputs()
    flags += _timed(seconds, "buffers", lambda: buffer_flags(state))
    flags += _timed(seconds, "replay", lambda: replay_flags(candidate, state.fresh_outputs, clock))
    answers = Path(job.result).parent / wire.answers_file(state.number)
    _timed(seconds, "answers", lambda: save_answers(candidate, state.float_read_only, answers, state.sample))
    state.result.answers_file = str(answers)
    flags += _timed(seconds, "torch_compute", lambda: torch_compute_flags(candidate.call))
    flags += _timed(seconds, "host_numerics", lambda: host_numerics_flags(candidate.call, job.source, clock.on_gpu))
    if clock.on_gpu:
        state.result.kernels = _timed(seconds, "kernels", lambda: kernel_breakdown(candidate.call, clock))
        flags += _timed(seconds, "foreign_kernels", lambda: foreign_kernel_flags(candidate.call, clock, harness.launches))
    changed = harness.changed()
    if changed:
        flags.append(f"harness_patching: timing functions replaced by the candidate: {changed}")
    refused = audit.first_refusal(sandbox)
    if refused is not None:
        flags.append(f"{audit.CHEAT_OF[refused[0]]}: {refused[0].value}: {refused[1]}")
    state.result.flags += flags


# What the serving step relies on, remembered when this module loads: before any candidate code runs.
GRAPH_HARNESS = graphs.harness_snapshot()


def measure_serving(job: wire.TimingJob, state: _CaseState, clock: Clock) -> None:
    """Every implementation's serving-true times (`ferret.bench.graph`); the candidate's replayed answers added to its
    answers file for the judge, and `harness_patching` where the candidate replaced what the step relies on."""
    fresh = load_replay_sets(state.case, job.device)
    for name, slot in state.slots.items():
        serving, answers = serve_one(name, slot, state, clock, fresh, own_files={job.source})
        state.result.serving[name] = serving
        if name == "candidate" and state.result.answers_file and answers:
            path = state.result.answers_file
            # copies: load_file's tensors may map the very file save_file is about to rewrite
            save_file({**{k: t.clone() for k, t in load_file(path).items()}, **answers}, path)
    changed = graphs.harness_changed(GRAPH_HARNESS)
    if changed and job.role == wire.CANDIDATE_TIMER:
        state.result.flags.append(f"harness_patching: serving-timing functions replaced by the candidate: {changed[:8]}")


def serve_one(
    name: str, slot: Slots, state: _CaseState, clock: Clock, fresh: list[dict], own_files: set[str]
) -> tuple[wire.ServingTimes, dict[str, torch.Tensor]]:
    """One implementation: its eager wall time, then its call captured and replayed (answers and time), or why it
    could not be captured. Copy 0 of the code is captured."""
    estimate = statistics.median(state.result.samples.get(name) or [0.01])
    serving = wire.ServingTimes(eager_ms=graphs.eager_wall_ms(slot.call, clock.sync, estimate))
    if slot.enter is not None:
        slot.enter(0)
    fn, params = slot.copies[0], slot.params
    try:
        captured = graphs.capture(lambda i, o: fn(i, o, params), slot.pool[0], state.fresh_outputs())
    except Exception as err:  # noqa: BLE001 - any failure of the capture is the finding
        serving.not_capturable, serving.capture_site = graphs.capture_failure(err, own_files)
        _settle_after_failed_capture()
        return serving, {}
    plan = graphs.replay_plan(slot.pool, fresh)
    answers = graphs.replay_answers(captured, plan)
    serving.replayed_on = sorted({key.rsplit(".", 1)[0].removeprefix("graph.") for key in answers})
    serving.replay_ms = graphs.replay_ms(captured, slot.pool, clock.flush_buffer.zero_, clock.spin)
    return serving, answers


def _settle_after_failed_capture() -> None:
    """A failed capture can leave an error pending on the device; it is read and dropped here so that the next
    implementation's work does not raise it."""
    try:
        torch.cuda.synchronize()
    except Exception:  # noqa: BLE001, S110 - the error is the failed capture's, already recorded
        pass


def load_replay_sets(case: wire.TimingCaseJob, device: str) -> list[dict]:
    """The judge's fresh draws of the case for graph replay (`TimingCaseJob.replay_file`), on `device`."""
    if not case.replay_file:
        return []
    sets: list[dict] = [{} for _ in range(case.replay_sets)]
    for key, tensor in load_file(case.replay_file).items():
        parsed = wire.parse_pool_key(key)
        if parsed is None or parsed[0] >= case.replay_sets:
            raise ValueError(f"{case.replay_file}: {key!r} is not a replay set key")
        sets[parsed[0]][parsed[1]] = tensor.to(device, copy=True)
    return sets


def load_baseline(job: wire.TimingJob) -> Callable[..., Any]:
    """The baseline: its module imported from the judge's copy of the project files it needs, first on the path;
    or one self-contained file."""
    if not job.import_root:
        return load_function(job.source, job.entry, "ferret_baseline")
    sys.path.insert(0, job.import_root)
    return getattr(importlib.import_module(job.module), job.entry)


def load_implementations(job: wire.TimingJob) -> dict[str, Any]:
    """Each implementation this process times, as its loaded copies (`CODE_COPIES` of the candidate, `CandidateCopies`;
    torch's kernels load once per process, so the baselines are one copy each)."""
    if job.role == wire.CANDIDATE_TIMER:
        return {"candidate": CandidateCopies(job.source, job.entry, CODE_COPIES)}
    baseline = load_baseline(job)
    implementations: dict[str, Any] = {"baseline": [baseline]}
    if job.compile:
        implementations["baseline_compiled"] = [torch.compile(baseline)]
    return implementations


def run_steps(
    job: wire.TimingJob,
    implementations: dict,
    clock: Clock,
    harness: HarnessGuard,
    sandbox: audit.Sandbox | None = None,
    warmed: Callable[[], None] = lambda: None,
) -> list[wire.TimingCaseResult]:
    """Every case's rounds and checks, each step when the judge says go; `warmed` is called once every case is
    warmed up, before the first step (a reference timer gives back its `WarmUpTurn` there)."""
    steps = Steps(Path(job.result).parent)
    probe = (
        guards.interference_probe(clock.flush_buffer, warm=lambda: clock.spin(1.0))
        if clock.on_gpu and job.role == wire.REFERENCE_TIMER
        else None
    )
    results = []
    for number, case in enumerate(job.cases):
        state = prepare_case(job, case, number, implementations, clock)
        if number == 0 and clock.on_gpu and job.role == wire.CANDIDATE_TIMER:
            # The profiler's first use starts CUPTI (seconds): done here, while the reference timer is still
            # loading torch.compile, not in the first case's post step, which both processes wait for.
            _timed(state.result.seconds, "profiler_start", lambda: device_us_per_kernel(clock.sync, clock, 1))
        if number == 0:
            _timed(state.result.seconds, "warm_ahead", lambda: warm_up_ahead(job, implementations, clock))
            warmed()
        for r in range(job.repeats):
            step = f"{number} {r}"
            steps.ready(step)
            if r == 0:
                if number == 0 and clock.on_gpu:
                    clock.calibrate()  # alone on the GPU now (the judge's first step): see Clock.calibrate
                measure_host_times(state, clock)
            time_round(state, clock, probe, reference=job.role == wire.REFERENCE_TIMER)
            clock.sync()
            steps.finished(step)
        step = f"{number} post"
        steps.ready(step)
        if job.role == wire.CANDIDATE_TIMER:
            check_candidate_calls(job, state, clock, harness, sandbox)
        if clock.on_gpu:  # last: a failed capture must not cost the checks above
            _timed(state.result.seconds, "serving", functools.partial(measure_serving, job, state, clock))
        clock.sync()
        results.append(state.result)
        del state  # this case's pool and slots go before the next case's are made
        steps.finished(step)
    return results


def main(job_path: str) -> int:
    job = wire.TimingJob.read(Path(job_path))
    on_gpu = job.device == "cuda"
    if os.environ.get("TRITON_INTERPRET") == "1":
        prepare_interpreter()  # the interpreter the candidate's process gets (ferret/sandbox/interpreter.py)
    # The harness's functions are remembered before the candidate's code runs, and checked after.
    take_settings(job.settings)
    harness = HarnessGuard(sys.modules[__name__], LaunchRecorder())
    # The candidate's timer runs candidate code: the sandbox's audit hook first (ferret/sandbox/audit.py). The
    # reference timer runs only the baseline and torch.compile, which starts compiler processes of its own.
    if job.role == wire.CANDIDATE_TIMER:
        audit.load_language_runtime(Path(job.source), on_gpu)
    sandbox = audit.install_if_asked(Path(job.result).parent, job.settings) if job.role == wire.CANDIDATE_TIMER else None
    neutral_argv()
    if job.role == wire.CANDIDATE_TIMER:
        hide_harness_modules(Path(job.source))
    # Reference timers load, compile and warm up one at a time (ferret/bench/warmup_turn.py says why).
    turn = WarmUpTurn.for_compile_cache(timing_job_key(job)) if job.role == wire.REFERENCE_TIMER else WarmUpTurn(None)
    waiting = time.perf_counter()
    turn.take()
    turn_seconds = round(time.perf_counter() - waiting, 4)
    loading = time.perf_counter()
    implementations = load_implementations(job)
    load_seconds = round(time.perf_counter() - loading, 4)
    device_name = torch.cuda.get_device_name(0) if on_gpu else "cpu (guard rehearsal: times are not speedups)"
    clock = Clock(on_gpu, guards.l2_bytes_of(job.device))
    try:
        results = run_steps(job, implementations, clock, harness, sandbox, warmed=turn.warmed_up)
    finally:
        turn.give_back()
    if results:
        results[0].seconds["load"] = load_seconds  # loading the implementations: once, told with the first case
        results[0].seconds["warm_up_turn"] = turn_seconds  # waiting for the other reference timers to warm up
    folder = Path(job.result).parent
    Path(job.result).write_text(json.dumps(asdict(wire.TimingResults(device=device_name, cases=results))))
    (folder / wire.DONE_FILE).write_text("ok")
    if job.settings.get(wire.SETTING_WAIT_FOR_KILL) == "1":
        while True:  # killed by the judge: no exit hook of the candidate runs after the result is written
            time.sleep(60)
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m ferret.bench.process")
    parser.add_argument("job")
    sys.exit(main(parser.parse_args().job))
