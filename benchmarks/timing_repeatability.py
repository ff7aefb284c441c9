"""Are the judge's timings repeatable? The same candidate timed by the judge several times, each time with
fresh timing processes (the candidate's and the reference's), on every speed case of every contract.

    python benchmarks/timing_repeatability.py [--ops rmsnorm softmax rope mla_attention] [--checks 3] [--out DIR]

For each case it prints the candidate's, the eager baseline's and torch.compile's median of each check and the
speedups, and the largest disagreement between checks, against the issue's limit (5%, or 0.5 us, whichever is
larger). It uses `ferret.gate.timing.time_candidate`, the judge's own timing (two processes, interleaved
rounds, answers checked), on the op's locked GPU gate (built first when missing). GPU only; not a test.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from honest_candidates import CANDIDATES  # noqa: E402 - beside this script, on sys.path when run as a file

LIMIT_FRACTION, LIMIT_MS = 0.05, 0.0005


def _disagreement(values: list[float]) -> tuple[float, bool]:
    """(max - min) / min of the checks' values, and whether it is within the limit."""
    low, high = min(values), max(values)
    return (high - low) / low, high - low <= max(LIMIT_FRACTION * low, LIMIT_MS)


def time_op(op: str, checks: int, gates_dir: Path) -> dict:
    from ferret.contract.task import Task
    from ferret.gate.judge import locate_gate
    from ferret.gate.lock import verify_gate
    from ferret.gate.models import GateManifest
    from ferret.gate.timing import time_candidate

    path = REPO / "contracts" / f"{op}.yaml"
    task = Task.load(path)
    gate = locate_gate(path, task.contract, gates_dir, "gpu", lambda m: None)
    manifest = GateManifest.model_validate(verify_gate(gate))
    runs = []
    for _ in range(checks):
        started = time.perf_counter()
        result = time_candidate(task, manifest, gate, REPO / CANDIDATES[op], lambda m: None)
        if not result.measured:
            raise SystemExit(f"{op}: not measured: {result.reason}")
        runs.append({"seconds": time.perf_counter() - started, "result": result.model_dump(mode="json")})
    return {"op": op, "runs": runs}


def table(ops: list[dict]) -> tuple[str, bool]:
    lines = ["| op | case | what | per check (us or x) | disagreement | within limit | unstable in any |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    all_within = True
    for entry in ops:
        cases = [c["case"] for c in entry["runs"][0]["result"]["cases"]]
        for k, case in enumerate(cases):
            per_run = [r["result"]["cases"][k] for r in entry["runs"]]
            unstable = any(c["unstable"] for c in per_run)
            for what, key, scale in (("candidate", "candidate_ms", 1e3), ("eager", "baseline_ms", 1e3),
                                     ("torch.compile", "baseline_compiled_ms", 1e3), ("speedup", "speedup", 1.0),
                                     ("speedup vs compile", "speedup_vs_compiled", 1.0)):
                values = [c[key] for c in per_run if c.get(key) is not None]
                if len(values) < len(per_run):
                    continue
                fraction, within = _disagreement(values) if scale != 1.0 else (
                    (max(values) - min(values)) / min(values), (max(values) - min(values)) / min(values) <= LIMIT_FRACTION)
                all_within &= within
                shown = ", ".join(f"{v * scale:.1f}" if scale != 1.0 else f"{v:.3f}" for v in values)
                lines.append(f"| {entry['op']} | {case} | {what} | {shown} | {fraction:.1%} | {'yes' if within else 'NO'} | "
                             f"{'YES' if unstable else 'no'} |")
    return "\n".join(lines), all_within


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", nargs="+", default=list(CANDIDATES))
    parser.add_argument("--checks", type=int, default=3)
    parser.add_argument("--gates-dir", type=Path, default=REPO / "gates")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)

    import torch
    import triton

    ops = []
    for op in args.ops:  # written after each op: a call cut short keeps what it measured
        ops.append(time_op(op, args.checks, args.gates_dir))
        print(f"{op}: timings took {[round(r['seconds'], 1) for r in ops[-1]['runs']]} s", flush=True)
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / f"timing-repeatability-{op}.json").write_text(json.dumps(ops[-1], indent=1) + "\n")
    text, within = table(ops)
    result = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "device": torch.cuda.get_device_name(0),
        "versions": {"torch": torch.__version__, "triton": triton.__version__, "python": sys.version.split()[0]},
        "command": "python benchmarks/timing_repeatability.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "limit": "every case's medians and speedups within 5% (or 0.5 us) between checks",
        "all_within_limit": within,
        "seconds_per_timing": {e["op"]: [round(r["seconds"], 1) for r in e["runs"]] for e in ops},
        "ops": ops,
    }
    print(text)
    print(f"all within the limit: {within}; seconds per timing: {result['seconds_per_timing']}")
    print("fraction of floor: " + "; ".join(
        f"{e['op']}/{c['case']}: {statistics.median(r['result']['cases'][k]['fraction_of_floor'] for r in e['runs']):.0%}"
        for e in ops for k, c in enumerate(e["runs"][0]["result"]["cases"])))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "timing-repeatability.json").write_text(json.dumps(result, indent=1) + "\n")
        (args.out / "timing-repeatability.md").write_text(text + "\n")
    return 0 if within else 1


if __name__ == "__main__":
    raise SystemExit(main())
