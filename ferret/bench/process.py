"""The timing process: candidate and baseline timed side by side (`python -m ferret.bench.process job.json`).

It runs candidate code, so it is started by the judge like the candidate's process (empty folder,
scrubbed environment, no gates, no `tasks/`), knows no right answer and is trusted with nothing: it
sends back times, the answers the timed calls left in their output buffers and flags, and the judge
(`ferret.gate.timing`) checks all of it. Its files are declared in `ferret.wire`.

Candidate and baseline are timed interleaved in this one process (so clocks, temperature and the
driver's state are shared), each with `triton.testing.do_bench` (median of many calls, L2 flushed before
each call); the median over the interleaved rounds is reported. torch.compile of the baseline is timed
beside them when the job asks for it.
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any, cast

import torch
import xxhash
from safetensors.torch import load_file, save_file

from ferret import wire
from ferret.bench import guards
from ferret.sandbox.runner import fresh_outputs as runner_outputs
from ferret.sandbox.watch import HarnessGuard, LaunchRecorder


def load_function(path: str, attr: str, module_name: str) -> Callable[..., Any]:
    """`attr` of the Python file at `path`, loaded as `module_name` (no import path involved)."""
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return getattr(module, attr)


def digest(tensors: dict) -> str:
    """xxhash of every output's bytes, in name order."""
    hasher = xxhash.xxh3_128()
    for name in sorted(tensors):
        hasher.update(tensors[name].detach().contiguous().reshape(-1).view(torch.uint8).cpu().numpy().tobytes())
    return hasher.hexdigest()


class Clock:
    """How one implementation is timed: do_bench on the GPU, a plain median of three on the CPU rehearsal."""

    def __init__(self, on_gpu: bool):
        self.on_gpu = on_gpu

    def sync(self) -> None:
        if self.on_gpu:
            torch.cuda.synchronize()

    def bench(self, fn: Callable[[], None]) -> float:
        if self.on_gpu:
            import triton.testing  # imported on the GPU only: the CPU rehearsal never needs it

            # cast: with return_mode="median" do_bench returns one number; its inferred type also covers the
            # list that quantiles would give and a None.
            median = cast(float, triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median"))
            return float(median)
        times = []
        for _ in range(3):
            started = time.perf_counter()
            fn()
            times.append((time.perf_counter() - started) * 1e3)
        return statistics.median(times)


class Slots:
    """Rotating input sets and output buffers for one implementation on one case.

    One more output set than input sets: each output buffer meets a different input set every time around,
    so an answer left in a buffer by an earlier call is never the right one for this call; and a different
    input set, at a different address, on every call: nothing to replay."""

    def __init__(self, fn: Callable[..., None], pool: list[dict], fresh_outputs: Callable[[], dict], params: dict):
        self.fn, self.pool, self.params = fn, pool, params
        self.outputs = [fresh_outputs() for _ in range(len(pool) + 1)]
        self.last_input: list[int | None] = [None] * len(self.outputs)
        self.counter = itertools.count()

    def call(self) -> None:
        k = next(self.counter)
        i, j = k % len(self.pool), k % len(self.outputs)
        self.last_input[j] = i
        self.fn(self.pool[i], self.outputs[j], self.params)


def load_pool(case: wire.TimingCaseJob, device: str) -> list[dict]:
    pool: list[dict] = [{} for _ in range(case.pool_sets)]
    for key, tensor in load_file(case.pool_file).items():
        parsed = wire.parse_pool_key(key)
        if parsed is None:
            raise ValueError(f"{case.pool_file}: {key!r} is not a pool key")
        pool[parsed[0]][parsed[1]] = tensor.to(device)
    return pool


def warm_up(slots: dict[str, Slots]) -> str | None:
    """One call of each (compilation and autotuning stay out of the numbers). torch.compile of the baseline
    may fail: it is dropped and its error returned; any other failure propagates."""
    compile_error = None
    for name in list(slots):
        try:
            slots[name].call()
        except Exception as err:  # noqa: BLE001 - only torch.compile of the baseline may fail here
            if name != "baseline_compiled":
                raise
            compile_error = f"{type(err).__name__}: {err}"[:300]
            del slots[name]
    return compile_error


def interleaved_medians(slots: dict[str, Slots], clock: Clock, repeats: int) -> dict[str, list[float]]:
    """`repeats` rounds, each timing every implementation once, in turn (persisting L2 reset first)."""
    samples: dict[str, list[float]] = {k: [] for k in slots}
    clock.sync()
    for _ in range(repeats):
        for name, slot in slots.items():
            if clock.on_gpu:
                guards.reset_persisting_l2()
            clock.sync()
            samples[name].append(clock.bench(slot.call))
    return samples


def wall_clock_flag(candidate: Slots, clock: Clock, event_ms: float) -> tuple[float, list[str]]:
    """Synchronized wall time per call, with a device-wide synchronize before the clock stops: work hidden on
    a side stream or in a thread shows up here even if the events missed it."""
    calls = max(10, min(200, int(20.0 / max(event_ms, 1e-3))))
    clock.sync()
    started = time.perf_counter()
    for _ in range(calls):
        candidate.call()
    clock.sync()
    wall_ms = (time.perf_counter() - started) * 1e3 / calls
    if clock.on_gpu and event_ms < 0.5 * wall_ms and wall_ms - event_ms > 0.05:
        return wall_ms, [f"side_stream_or_thread: event time {event_ms * 1e3:.1f} us but synchronized wall time "
                         f"{wall_ms * 1e3:.1f} us per call"]
    return wall_ms, []


def replay_flags(candidate: Slots, fresh_outputs: Callable[[], dict], clock: Clock) -> list[str]:
    """Every output slot's answer, fingerprinted now, must be what a synchronous call on the same inputs gives."""
    replayed = []
    for j, i in enumerate(candidate.last_input):
        if i is None:
            continue
        seen = digest(candidate.outputs[j])
        check = fresh_outputs()
        candidate.fn(candidate.pool[i], check, candidate.params)
        clock.sync()
        if digest(check) != seen:
            replayed.append(j)
    if replayed:
        return [f"cross_call_caching: outputs of timed calls {replayed[:8]} differ from a synchronous call on the "
                "same inputs (work deferred, batched across calls, or answers replayed)"]
    return []


def save_answers(candidate: Slots, float_read_only: list[str], path: Path) -> None:
    """Nothing here knows the right answers (the candidate shares this process): every timed call's answer, as
    it was left in its output buffer, goes to the judge with the input set it answered."""
    pool = candidate.pool
    answers = {wire.pool_key(i, n): pool[i][n].contiguous().cpu() for i in range(len(pool)) for n in float_read_only}
    for j, i in enumerate(candidate.last_input):
        if i is not None:
            answers.update({wire.slot_key(j, i, n): t.contiguous().cpu() for n, t in candidate.outputs[j].items()})
    save_file(answers, str(path))


def time_case(job: wire.TimingJob, case: wire.TimingCaseJob, number: int, implementations: dict, clock: Clock,
              harness: HarnessGuard) -> wire.TimingCaseResult:
    device = job.device
    pool = load_pool(case, device)
    float_read_only = [n for n in job.read_only if pool[0][n].is_floating_point()]

    def fresh_outputs() -> dict:
        return runner_outputs(case.outputs, device)

    slots = {name: Slots(fn, pool, fresh_outputs, job.params) for name, fn in implementations.items()}
    compile_error = warm_up(slots)
    l2_state = guards.reset_persisting_l2() if clock.on_gpu else "not applicable on the CPU"
    samples = interleaved_medians(slots, clock, job.repeats)
    med = {k: statistics.median(v) for k, v in samples.items()}
    wall_ms, flags = wall_clock_flag(slots["candidate"], clock, med["candidate"])
    flags += replay_flags(slots["candidate"], fresh_outputs, clock)
    answers = Path(job.result).parent / wire.answers_file(number)
    save_answers(slots["candidate"], float_read_only, answers)
    changed = harness.changed()
    if changed:
        flags.append(f"harness_patching: timing functions replaced by the candidate: {changed}")
    return wire.TimingCaseResult(
        case=case.case, candidate_ms=med["candidate"], baseline_ms=med["baseline"],
        baseline_compiled_ms=med.get("baseline_compiled"), samples=samples, compile_error=compile_error,
        wall_ms=wall_ms, pool_sets=len(pool), answers_file=str(answers), persisting_l2=l2_state, flags=flags,
    )


def main(job_path: str) -> int:
    job = wire.TimingJob.read(Path(job_path))
    baseline = load_function(job.baseline_file, job.baseline_attr, "ferret_baseline")
    # The harness's functions are remembered before the candidate's code runs, and checked after.
    harness = HarnessGuard(sys.modules[__name__], LaunchRecorder())
    candidate = load_function(job.candidate, job.entry, "ferret_candidate")
    implementations = {"candidate": candidate, "baseline": baseline}
    if job.compile_baseline:
        implementations["baseline_compiled"] = torch.compile(baseline)
    on_gpu = job.device == "cuda"
    device_name = torch.cuda.get_device_name(0) if on_gpu else "cpu (guard rehearsal: times are not speedups)"
    folder = Path(job.result).parent
    results = []
    for number, case in enumerate(job.cases):
        (folder / wire.CURRENT_FILE).write_text(str(number))  # the judge's sign of progress
        results.append(time_case(job, case, number, implementations, Clock(on_gpu), harness))
    Path(job.result).write_text(json.dumps(asdict(wire.TimingResults(device=device_name, cases=results))))
    (folder / wire.DONE_FILE).write_text("ok")
    if os.environ.get("FERRET_RUNNER_WAIT_FOR_KILL") == "1":
        while True:  # killed by the judge: no exit hook of the candidate runs after the result is written
            time.sleep(60)
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m ferret.bench.process")
    parser.add_argument("job")
    sys.exit(main(parser.parse_args().job))
