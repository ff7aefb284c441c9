"""Timing a correct candidate against the baseline, in a process of its own.

Candidate and baseline are timed interleaved in the same process (so clocks, temperature and the
driver's state are shared), each with `triton.testing.do_bench` (median of many calls, L2 flushed
before each call); the median over the interleaved rounds is reported. torch.compile of the baseline
is timed beside it where the contract asks for it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Callable

from ferret.gate.models import CaseTiming, GateManifest, TimingResult

METHOD = (
    "triton.testing.do_bench median (L2 flushed before every call), candidate and baseline interleaved "
    "in one process, median over {repeats} rounds; CUDA synchronize before each round"
)


def time_candidate(contract_path, contract, manifest: GateManifest, gate: Path, candidate: Path, progress: Callable[[str], None]) -> TimingResult:
    from ferret.contract.imports import project_root_of
    from ferret.gate.judge import _prepare_inputs
    from ferret.gate.inputs import output_specs
    from ferret.sandbox.launch import candidate_environment, run_isolated

    wanted = set(contract.speed.cases) or {c.name for c in contract.cases_for("gpu") if c.kind == "correctness"}
    records = [r for r in manifest.variants if r.case in wanted and r.dtype == contract.primary_dtype]
    workdir = Path(tempfile.mkdtemp(prefix="ferret-timing-"))
    jobs = []
    for record in records:
        target = workdir / f"{record.id}.safetensors"
        _prepare_inputs(contract, gate, record, target)
        case = next(c for c in contract.cases_for("gpu") if c.name == record.case)
        specs = output_specs(contract, case, record.dtype)
        jobs.append(
            {
                "case": record.case,
                "inputs_file": str(target),
                "outputs": {n: [list(s), str(d).removeprefix("torch.")] for n, (s, d) in specs.items()},
            }
        )
    job = {
        "candidate": str(Path(candidate).resolve()),
        "entry": contract.candidate_abi.entry,
        "baseline": contract.baseline.entry,
        "compile_baseline": contract.baseline.compile,
        "project_root": str(project_root_of(contract_path)),
        "params": contract.params,
        "repeats": contract.speed.repeats,
        "cases": jobs,
        "result": str(workdir / "timing.json"),
    }
    (workdir / "job.json").write_text(json.dumps(job))
    progress(f"timing {len(jobs)} cases against the baseline ({contract.speed.repeats} interleaved rounds)")
    outcome = run_isolated(
        [sys.executable, "-m", "ferret.bench.timing", "job.json"],
        workdir,
        candidate_environment(workdir, interpret=False),
        contract.budgets.candidate_timeout_s,
        contract.budgets.candidate_memory_mb,
    )
    result_file = workdir / "timing.json"
    if not result_file.exists():
        return TimingResult(measured=False, reason=f"timing process failed: {outcome.kind} {outcome.message} {outcome.stderr_tail[-1500:]}")
    raw = json.loads(result_file.read_text())
    cases = [CaseTiming(**c) for c in raw["cases"]]
    speedups = [c.speedup for c in cases]
    geomean = statistics.geometric_mean(speedups) if speedups else None
    return TimingResult(
        measured=True,
        device=raw["device"],
        method=METHOD.format(repeats=contract.speed.repeats),
        cases=cases,
        min_speedup_required=contract.speed.min_speedup,
        target_met=bool(speedups) and min(speedups) >= contract.speed.min_speedup,
        geomean_speedup=geomean,
    )


def _bench_process(job_path: str) -> int:
    import importlib.util

    import torch
    import triton.testing
    from safetensors.torch import load_file

    job = json.loads(Path(job_path).read_text())
    sys.path.insert(0, job["project_root"])
    module_name, _, attr = job["baseline"].partition(":")
    baseline = getattr(__import__(module_name, fromlist=[attr]), attr)
    spec = importlib.util.spec_from_file_location("ferret_candidate", job["candidate"])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    candidate = getattr(module, job["entry"])
    compiled = torch.compile(baseline) if job["compile_baseline"] else None
    dtypes = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "float64": torch.float64,
              "int64": torch.int64, "int32": torch.int32}
    results = []
    for case in job["cases"]:
        inputs = {k: v.cuda() for k, v in load_file(case["inputs_file"]).items()}
        outputs = {n: torch.empty(tuple(s), dtype=dtypes[d], device="cuda") for n, (s, d) in case["outputs"].items()}
        params = job["params"]
        fns = {
            "candidate": lambda: candidate(inputs, outputs, params),
            "baseline": lambda: baseline(inputs, outputs, params),
        }
        if compiled is not None:
            fns["baseline_compiled"] = lambda: compiled(inputs, outputs, params)
        compile_error = None
        for name, fn in list(fns.items()):  # warm-up: compilation and autotuning stay out of the numbers
            try:
                fn()
            except Exception as err:  # noqa: BLE001 - only torch.compile of the baseline may fail here
                if name != "baseline_compiled":
                    raise
                compile_error = f"{type(err).__name__}: {err}"[:300]
                del fns[name]
        samples = {k: [] for k in fns}
        torch.cuda.synchronize()
        for _ in range(job["repeats"]):
            for name, fn in fns.items():
                torch.cuda.synchronize()
                samples[name].append(float(triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")))
        med = {k: statistics.median(v) for k, v in samples.items()}
        results.append(
            {
                "case": case["case"],
                "candidate_ms": med["candidate"],
                "baseline_ms": med["baseline"],
                "baseline_compiled_ms": med.get("baseline_compiled"),
                "speedup": med["baseline"] / med["candidate"],
                "speedup_vs_compiled": (med["baseline_compiled"] / med["candidate"]) if "baseline_compiled" in med else None,
                "samples": samples,
                "compile_error": compile_error,
            }
        )
    Path(job["result"]).write_text(json.dumps({"device": torch.cuda.get_device_name(0), "cases": results}))
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m ferret.bench.timing")
    parser.add_argument("job")
    sys.exit(_bench_process(parser.parse_args().job))
