"""Does where a process's tensors sit in GPU memory set a short baseline's per-process offset? Memory pools per process.

On the H200 (benchmarks/results/2026-12-01-h200-session5/), eager rope decode (about 20 kernels, with intermediates
of their own) read 71-72 us in some timing processes and 76-78 us in others, with the host layout, the flush buffer,
the stream and the CPU held fixed; inside one process, moving a tiny kernel's data to another allocation moved it
by up to 0.55 us (session 4). GPU virtual addresses repeat between processes, the physical memory behind them does
not: where a process's tensors land may set its offset. Each of `--processes` fresh processes makes `--pools`
memory pools (`torch.cuda.MemPool`: segments of their own, allocated anew from the driver) and, for each pool:

- `all`: the input sets, outputs and the baseline's intermediates allocated in that pool;
- `intermediates`: the input sets and outputs of the process's default pool, only the intermediates in that pool.

and times eager rope decode with the judge's clock, `--rounds` rounds per pool and mode. If the pools of one process
spread as much as processes do, placement is the cause and the judge can average over pools inside a process; if each
process's pools agree, the offset is set once per process (its loaded code, its context).

    python benchmarks/placement_probe.py --processes 4 --pools 6 --out DIR
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _spread_pct(xs: list[float]) -> float | None:
    return round(100 * (max(xs) - min(xs)) / min(xs), 2) if xs else None


def _child(args: argparse.Namespace) -> dict:
    import torch

    from ferret.bench import guards
    from ferret.bench.process import Clock, Slots
    from ferret.contract.imports import load_entry, project_root_of
    from ferret.contract.load import load_contract
    from ferret.gate.inputs import draw_inputs, output_specs

    contract_path = REPO / "contracts" / f"{args.op}.yaml"
    contract = load_contract(contract_path)
    case = next(c for c in contract.cases_for("gpu") if c.name == args.case)
    eager = load_entry(contract.baseline.entry, project_root_of(contract_path))
    peaks = guards.peaks_for(torch.cuda.get_device_name(0)) or {"l2_bytes": 64 << 20}
    clock = Clock(on_gpu=True, l2_bytes=peaks["l2_bytes"])
    clock.calibrate()
    dtype = contract.primary_dtype
    host_inputs = draw_inputs(contract, case, dtype, seed=1)
    floats = [i.name for i in contract.inputs if i.role == "in" and host_inputs[i.name].is_floating_point()]
    specs = output_specs(contract, case, dtype)

    def make_slots() -> Slots:
        inputs = {k: v.cuda() for k, v in host_inputs.items()}
        pool = guards.input_pool(inputs, floats, 2 * peaks["l2_bytes"], generator=torch.Generator().manual_seed(1))
        return Slots(eager, pool, lambda: {n: torch.empty(s, dtype=d, device="cuda") for n, (s, d) in specs.items()},
                     contract.params)

    def timed(slots: Slots, pool: object) -> list[float]:
        with torch.cuda.use_mem_pool(pool):
            for _ in range(3):
                slots.call()
            host = clock.host_ms(slots.call)
            return [round(clock.bench(slots.call, host) * 1e3, 3) for _ in range(args.rounds)]

    default_slots = make_slots()
    pools = [torch.cuda.MemPool() for _ in range(args.pools)]
    rows: dict[str, list[list[float]]] = {"all": [], "intermediates": []}
    for pool in pools:
        with torch.cuda.use_mem_pool(pool):
            own_slots = make_slots()
        rows["all"].append(timed(own_slots, pool))
        rows["intermediates"].append(timed(default_slots, pool))
        first = next(iter(own_slots.pool[0].values()))
        rows.setdefault("first_input_address", []).append(hex(first.data_ptr()))  # type: ignore[arg-type]
        del own_slots
    return rows


def _run_child(args: argparse.Namespace) -> dict:
    command = [sys.executable, __file__, "--child", "--op", args.op, "--case", args.case, "--rounds", str(args.rounds),
               "--pools", str(args.pools)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode:
        return {"error": done.stderr[-3000:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def _summary(processes: list[dict]) -> dict:
    """Per mode: each process's per-pool medians, their spread inside the process, and the spread between processes
    of the mean over pools (what averaging over pools inside a process would give)."""
    summary: dict = {}
    for mode in ("all", "intermediates"):
        per_process = [[statistics.median(rounds) for rounds in p[mode]] for p in processes if mode in p]
        means = [statistics.fmean(pools) for pools in per_process]
        summary[mode] = {"pool_medians_us": per_process,
                         "spread_inside_process_pct": [_spread_pct(p) for p in per_process],
                         "first_pool_spread_between_processes_pct": _spread_pct([p[0] for p in per_process]),
                         "pool_means_us": [round(m, 3) for m in means],
                         "pool_mean_spread_between_processes_pct": _spread_pct(means)}
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--op", default="rope")
    parser.add_argument("--case", default="decode_q_64x128")
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--pools", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(_child(args)))
        return 0
    import torch
    import triton

    processes = []
    for index in range(args.processes):
        processes.append(_run_child(args))
        print(f"process {index}: {json.dumps(processes[-1])}", flush=True)
    result = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
              "device": torch.cuda.get_device_name(0),
              "versions": {"torch": torch.__version__, "triton": triton.__version__, "python": sys.version.split()[0]},
              "command": "python benchmarks/placement_probe.py " + " ".join(argv if argv is not None else sys.argv[1:]),
              "summary": _summary(processes), "processes": processes}
    text = json.dumps(result, indent=2)
    print(json.dumps(result["summary"], indent=1))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "placement-probe.json").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
