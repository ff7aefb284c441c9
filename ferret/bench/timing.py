"""Timing a correct candidate against the baseline, in a process of its own.

Candidate and baseline are timed interleaved in the same process (so clocks, temperature and the
driver's state are shared), each with `triton.testing.do_bench` (median of many calls, L2 flushed
before each call); the median over the interleaved rounds is reported. torch.compile of the baseline
is timed beside it where the contract asks for it.
"""

from __future__ import annotations

import argparse
import inspect
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Callable

# The timing process itself (`python -m ferret.bench.timing`) imports only torch, triton and the
# sandbox's watches: the judge-side models (pydantic) are imported by time_candidate alone.
_TIMING_CATALOGUE = {"side_stream_or_thread": [13], "cross_call_caching": [16, 17], "impossible_speed": [19, 18],
                     "harness_patching": [15], "warmup_detection": [17, 16], "input_mutation": [3]}

METHOD = (
    "triton.testing.do_bench median (L2 flushed before every call, persisting L2 reset), a rotating pool of "
    "re-randomized input sets larger than 2x L2 (fresh inputs at fresh addresses for every call), candidate and "
    "baseline interleaved in one process, median over {repeats} rounds; then synchronized wall time, every "
    "output fingerprinted and re-checked against a synchronous call, every timed answer checked by the judge "
    "against the reference on its input set, and the datasheet roofline floor"
)


def time_candidate(contract_path, contract, manifest, gate: Path, candidate: Path, progress: Callable[[str], None],
                   compare_compiled: bool = True, device: str = "cuda", deadline: float | None = None):
    """Time a correct candidate against the baseline in a process of its own; returns a TimingResult.
    torch.compile of the baseline is timed beside them when the contract asks and `compare_compiled`.

    `device="cpu"` is a rehearsal of the guards for tests (the judge never asks for it): the same process,
    pool, output slots, fingerprints and timed-answers check on a CPU gate's first case, under the Triton
    interpreter, with a plain clock instead of do_bench. Its times are not speedups: the result says
    `measured=False`, and no floor applies.

    The timing process gets `budgets.case_timeout_s` for each timed case and stops at `deadline` (a
    `time.monotonic()` instant: the check's own deadline).
    """
    workdir = Path(tempfile.mkdtemp(prefix="ferret-timing-"))
    try:
        return _time_in(workdir, contract_path, contract, manifest, gate, candidate, progress, compare_compiled, device,
                        deadline)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)  # inputs, pools of answers: hundreds of MB at production shapes


def _time_in(workdir: Path, contract_path, contract, manifest, gate: Path, candidate: Path, progress, compare_compiled: bool,
             device: str, deadline: float | None):
    from ferret.gate.models import CaseTiming, Detection, TimingResult

    import os

    import torch
    from safetensors.torch import load_file, save_file

    from ferret.bench import guards
    from ferret.contract.imports import project_root_of
    from ferret.gate.judge import _prepare_inputs
    from ferret.gate.inputs import output_specs
    from ferret.sandbox.launch import candidate_environment, run_isolated

    profile = "gpu" if device == "cuda" else "cpu"
    if device == "cuda":
        wanted = set(contract.speed.cases) or {c.name for c in contract.cases_for("gpu") if c.kind == "correctness"}
    else:
        wanted = {next(c.name for c in contract.cases_for("cpu") if c.kind == "correctness")}
    records = [r for r in manifest.variants if r.case in wanted and r.dtype == contract.primary_dtype]
    read_only = [i.name for i in contract.inputs if i.role == "in"]
    # The pool of input sets is drawn here and kept here: the timing process runs candidate code, which
    # may rewrite the sets it is given, so the judge checks every timed answer against its own copy.
    l2_bytes = guards.l2_bytes_of(device)
    generator = torch.Generator().manual_seed(int.from_bytes(os.urandom(7), "little"))
    jobs, pools = [], []
    for record in records:
        target = workdir / f"{record.id}.safetensors"
        _prepare_inputs(contract, gate, record, target)
        inputs = load_file(str(target))
        pool = guards.input_pool(inputs, [n for n in read_only if inputs[n].is_floating_point()],
                                 target_bytes=2 * l2_bytes, generator=generator)
        pools.append(pool)
        pool_file = workdir / f"{record.id}.pool.safetensors"
        save_file({f"set{i}.{n}": t for i, one_set in enumerate(pool) for n, t in one_set.items()}, str(pool_file))
        target.unlink()
        case = next(c for c in contract.cases_for(profile) if c.name == record.case)
        specs = output_specs(contract, case, record.dtype)
        jobs.append(
            {
                "case": record.case,
                "pool_file": str(pool_file),
                "pool_sets": len(pool),
                "outputs": {n: [list(s), str(d).removeprefix("torch.")] for n, (s, d) in specs.items()},
            }
        )
    from ferret.contract.imports import load_entry

    baseline_fn = load_entry(contract.baseline.entry, project_root_of(contract_path))
    # Both files are copied in: the timing process sees neither the project's tasks/ nor the gates (it runs
    # candidate code), and loads the baseline by file, not by module name (a machine may have an unrelated
    # top-level `tasks` package installed). A baseline is one self-contained file, like a candidate.
    shutil.copyfile(candidate, workdir / "candidate.py")
    shutil.copyfile(inspect.getsourcefile(baseline_fn), workdir / "baseline.py")
    job = {
        "candidate": str(workdir / "candidate.py"),
        "entry": contract.candidate_abi.entry,
        "baseline": contract.baseline.entry,
        "baseline_file": str(workdir / "baseline.py"),
        "baseline_attr": baseline_fn.__name__,
        "compile_baseline": contract.baseline.compile and compare_compiled and device == "cuda",
        "device": device,
        "project_root": str(project_root_of(contract_path)),
        "params": contract.params,
        "read_only": read_only,
        "repeats": contract.speed.repeats,
        "cases": jobs,
        "result": str(workdir / "timing.json"),
    }
    (workdir / "job.json").write_text(json.dumps(job))
    progress(f"timing {len(jobs)} cases against the baseline ({contract.speed.repeats} interleaved rounds)")
    from ferret.gate.judge import hidden_from_candidates
    from ferret.progress import as_reporter

    reporter = as_reporter(progress)
    names = [j["case"] for j in jobs]

    def moved(position: object) -> None:
        if isinstance(position, int) and position < len(names):
            reporter.step("timing", position, len(names), names[position])

    reporter.step("timing", 0, len(names), "starting the timing process")
    outcome = run_isolated(
        [sys.executable, "-m", "ferret.bench.timing", "job.json"],
        workdir,
        candidate_environment(workdir, interpret=device != "cuda"),
        contract.budgets.case_timeout_s,
        contract.budgets.candidate_memory_mb,
        hide=hidden_from_candidates(gate, Path(contract_path)),
        finished_marker=workdir / "done",
        deadline=deadline,
        progress_token=lambda: _current_case(workdir),
        on_progress=moved,
    )
    reporter.step("timing", len(names), len(names), "done")
    result_file = workdir / "timing.json"
    if not result_file.exists():
        return TimingResult(measured=False, reason=f"timing process failed: {outcome.kind} {outcome.message} {outcome.stderr_tail[-1500:]}")
    raw = json.loads(result_file.read_text())
    from ferret.bench.answers import check_timed_answers

    if [c.get("case") for c in raw["cases"]] != [j["case"] for j in jobs]:
        return TimingResult(measured=False, reason=f"timing process returned cases {[c.get('case') for c in raw['cases']]}, "
                            f"not the {[j['case'] for j in jobs]} it was given")
    # The floor and the speedup are computed here, from what the judge knows (the device it sees, the shapes
    # it drew): the timing process shares its memory with the candidate.
    peaks = _peaks_seen_by_judge(device)
    for pool, job_case, case in zip(pools, jobs, raw["cases"]):
        # Every timed call's answer against the reference, computed here on the judge's copy of its input set.
        checked, wrong = check_timed_answers(
            contract_path, contract, pool, Path(case.pop("answers_file")), contract.primary_dtype, read_only
        )
        case["answers_checked"] = checked
        case["flags"] = case["flags"] + wrong
        case["speedup"] = case["baseline_ms"] / case["candidate_ms"]
        case["review"] = ([f"speedup {case['speedup']:.1f}x over the baseline is above {guards.SUSPICIOUS_SPEEDUP:g}x: look at it"]
                          if case["speedup"] > guards.SUSPICIOUS_SPEEDUP else [])
        case["floor_ms"] = None
        if peaks is not None:
            shapes = {n: torch.empty(shape, dtype=getattr(torch, dtype), device="meta") for n, (shape, dtype) in job_case["outputs"].items()}
            min_bytes = guards.minimum_bytes(pool[0], shapes, read_only)
            case["floor_ms"] = floor = guards.floor_ms(min_bytes, 0.0, peaks)
            if case["candidate_ms"] < guards.FLOOR_MARGIN * floor:
                case["flags"].append(
                    f"impossible_speed: {case['candidate_ms'] * 1e3:.2f} us is under {guards.FLOOR_MARGIN:g} x the {floor * 1e3:.2f} us "
                    f"floor ({min_bytes} bytes at the datasheet {peaks['bytes_per_s'] / 1e12:g} TB/s)")
    cases = [CaseTiming(**c) for c in raw["cases"]]
    detections = []
    for c in cases:
        for flag in c.flags:
            cheat, _, evidence = flag.partition(": ")
            detections.append(Detection(cheat=cheat, catalogue=_TIMING_CATALOGUE.get(cheat, []), evidence=f"{c.case}: {evidence}", source="timing"))
    if device != "cuda":
        return TimingResult(measured=False, reason="guard rehearsal on the CPU: the guards ran, the times are not speedups",
                            device=raw["device"], method=METHOD.format(repeats=contract.speed.repeats), cases=cases,
                            detections=detections)
    speedups = [c.speedup for c in cases]
    geomean = statistics.geometric_mean(speedups) if speedups else None
    return TimingResult(
        detections=detections,
        review=[f"{c.case}: {r}" for c in cases for r in c.review],
        measured=True,
        device=raw["device"],
        method=METHOD.format(repeats=contract.speed.repeats),
        cases=cases,
        min_speedup_required=contract.speed.min_speedup,
        target_met=bool(speedups) and min(speedups) >= contract.speed.min_speedup,
        geomean_speedup=geomean,
    )


def _current_case(workdir: Path) -> int | None:
    """The timed case the timing process last said it started (its sign of progress)."""
    try:
        return int((workdir / "current").read_text())
    except (OSError, ValueError):
        return None


def _peaks_seen_by_judge(device: str) -> dict | None:
    """The datasheet peaks of the GPU this (the judge's) process sees; None on the CPU or an unlisted GPU."""
    import torch

    from ferret.bench import guards

    return guards.peaks_for(torch.cuda.get_device_name(0)) if device == "cuda" and torch.cuda.is_available() else None


def _digest(tensors: dict) -> str:
    """xxhash of every output's bytes, in name order (imports are local: judge-side code imports this module)."""
    import torch
    import xxhash

    digest = xxhash.xxh3_128()
    for name in sorted(tensors):
        digest.update(tensors[name].detach().contiguous().reshape(-1).view(torch.uint8).cpu().numpy().tobytes())
    return digest.hexdigest()


def load_function(path: str, attr: str, module_name: str):
    """`attr` of the Python file at `path`, loaded as `module_name` (no import path involved)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return getattr(module, attr)


def _bench_process(job_path: str) -> int:
    import itertools
    import time

    import torch
    import triton.testing
    from safetensors.torch import load_file, save_file

    from ferret.bench import guards
    from ferret.sandbox.runner import _fresh_outputs as runner_outputs
    from ferret.sandbox.watch import HarnessGuard, LaunchRecorder

    job = json.loads(Path(job_path).read_text())
    baseline = load_function(job["baseline_file"], job["baseline_attr"], "ferret_baseline")
    # The harness's functions are remembered before the candidate's code runs, and checked after.
    harness = HarnessGuard(sys.modules[__name__], LaunchRecorder())
    candidate = load_function(job["candidate"], job["entry"], "ferret_candidate")
    compiled = torch.compile(baseline) if job["compile_baseline"] else None
    device = job.get("device", "cuda")
    on_gpu = device == "cuda"
    device_name = torch.cuda.get_device_name(0) if on_gpu else "cpu (guard rehearsal: times are not speedups)"

    def sync():
        if on_gpu:
            torch.cuda.synchronize()

    def bench(fn) -> float:
        if on_gpu:
            return float(triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median"))
        times = []
        for _ in range(3):
            started = time.perf_counter()
            fn()
            times.append((time.perf_counter() - started) * 1e3)
        return statistics.median(times)

    results = []
    for case_number, case in enumerate(job["cases"]):
        (Path(job["result"]).parent / "current").write_text(str(case_number))  # the judge's sign of progress
        stored = load_file(case["pool_file"])
        pool = [{} for _ in range(case["pool_sets"])]
        for key, tensor in stored.items():
            index, _, name = key.removeprefix("set").partition(".")
            pool[int(index)][name] = tensor.to(device)
        del stored
        read_only = job["read_only"]
        float_read_only = [n for n in read_only if pool[0][n].is_floating_point()]
        params = job["params"]

        def fresh_outputs():
            return runner_outputs(case["outputs"], device)

        implementations = {"candidate": candidate, "baseline": baseline}
        if compiled is not None:
            implementations["baseline_compiled"] = compiled
        # One more output set than input sets: each output buffer meets a different input set every time
        # around, so an answer left in a buffer by an earlier call is never the right one for this call.
        slots = {name: [fresh_outputs() for _ in range(len(pool) + 1)] for name in implementations}
        last_input = {name: [None] * (len(pool) + 1) for name in implementations}
        counters = {name: itertools.count() for name in implementations}

        def timed(name):
            fn, outs, counter, last = implementations[name], slots[name], counters[name], last_input[name]

            def call():
                # A different input set, at a different address, on every call: nothing to replay.
                k = next(counter)
                i, j = k % len(pool), k % len(outs)
                last[j] = i
                fn(pool[i], outs[j], params)

            return call

        fns = {name: timed(name) for name in implementations}
        compile_error = None
        for name, fn in list(fns.items()):  # warm-up: compilation and autotuning stay out of the numbers
            try:
                fn()
            except Exception as err:  # noqa: BLE001 - only torch.compile of the baseline may fail here
                if name != "baseline_compiled":
                    raise
                compile_error = f"{type(err).__name__}: {err}"[:300]
                del fns[name]
        l2_state = guards.reset_persisting_l2() if on_gpu else "not applicable on the CPU"
        samples = {k: [] for k in fns}
        sync()
        for _ in range(job["repeats"]):
            for name, fn in fns.items():
                if on_gpu:
                    guards.reset_persisting_l2()
                sync()
                samples[name].append(bench(fn))
        med = {k: statistics.median(v) for k, v in samples.items()}

        flags = []
        # Wall clock with a device-wide synchronize before the clock stops: work hidden on a side
        # stream or in a thread shows up here even if the events missed it.
        calls = max(10, min(200, int(20.0 / max(med["candidate"], 1e-3))))
        sync()
        started = time.perf_counter()
        for _ in range(calls):
            fns["candidate"]()
        sync()
        wall_ms = (time.perf_counter() - started) * 1e3 / calls
        if on_gpu and med["candidate"] < 0.5 * wall_ms and wall_ms - med["candidate"] > 0.05:
            flags.append(f"side_stream_or_thread: event time {med['candidate'] * 1e3:.1f} us but synchronized wall time "
                         f"{wall_ms * 1e3:.1f} us per call")
        # Every pool slot's output, fingerprinted now, must be what a synchronous call on the same inputs gives.
        replayed = []
        for j, i in enumerate(last_input["candidate"]):
            if i is None:
                continue
            seen = _digest(slots["candidate"][j])
            check = fresh_outputs()
            candidate(pool[i], check, params)
            sync()
            if _digest(check) != seen:
                replayed.append(j)
        if replayed:
            flags.append(f"cross_call_caching: outputs of timed calls {replayed[:8]} differ from a synchronous call on the "
                         "same inputs (work deferred, batched across calls, or answers replayed)")
        # Nothing in this process knows the right answers (the candidate shares it): every timed call's answer,
        # as it was left in its output buffer, goes to the judge with the input set it answered.
        answers = {f"set{i}.{n}": pool[i][n].contiguous().cpu() for i in range(len(pool)) for n in float_read_only}
        for j, i in enumerate(last_input["candidate"]):
            if i is not None:
                answers.update({f"slot{j}.set{i}.{n}": t.contiguous().cpu() for n, t in slots["candidate"][j].items()})
        answers_file = Path(job["result"]).parent / f"answers-{case_number}.safetensors"
        save_file(answers, str(answers_file))
        changed = harness.changed()
        if changed:
            flags.append(f"harness_patching: timing functions replaced by the candidate: {changed}")
        results.append(
            {
                "case": case["case"],
                "candidate_ms": med["candidate"],
                "baseline_ms": med["baseline"],
                "baseline_compiled_ms": med.get("baseline_compiled"),
                "speedup_vs_compiled": (med["baseline_compiled"] / med["candidate"]) if "baseline_compiled" in med else None,
                "samples": samples,
                "compile_error": compile_error,
                "wall_ms": wall_ms,
                "pool_sets": len(pool),
                "answers_file": str(answers_file),
                "persisting_l2": l2_state,
                "flags": flags,
            }
        )
    Path(job["result"]).write_text(json.dumps({"device": device_name, "cases": results}))
    (Path(job["result"]).parent / "done").write_text("ok")
    if __import__("os").environ.get("FERRET_RUNNER_WAIT_FOR_KILL") == "1":
        while True:  # killed by the judge: no exit hook of the candidate runs after the result is written
            time.sleep(60)
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m ferret.bench.timing")
    parser.add_argument("job")
    sys.exit(_bench_process(parser.parse_args().job))
