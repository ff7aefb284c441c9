"""Why does a tiny case's time move between checks while its rounds agree inside each? Several fresh processes, one case.

On the H200 (benchmarks/results/2026-12-01-h200-repeat-all/), rope decode_q_64x128's candidate read 5.6, 6.05 and 5.8 us
in three checks, each check's five rounds within 0.1 us, and torch.compile's time moved the same way in the
same checks (8.67, 9.02, 9.05 us) although it is timed in another process. What the two processes of one check
share: the timed input values, and the GPU's state at that time. This probe separates them. Each of `--processes`
fresh processes times the same case with the judge's clock (`ferret.bench.process.Clock`) for input sets drawn
from each of `--seeds` (the same seeds in every process), and records per process:

- the SM clock, as the spin kernel's cycles per ms, before and after;
- per seed: the candidate, torch.compile of the baseline and the eager baseline (event clock, 3 rounds each),
  and the candidate's kernel device time from the profiler (no events around it);
- an empty call between the same events (what the events and the spin themselves add);
- one tiny torch kernel between the same events, the candidate without the flush, its kernels per call, and its
  time sampled over ~12 s in the one process beside nvidia-smi's temperatures, clocks and power
  (`_launch_and_time`).

If times follow the seed in every process, the values set them; if they move together per process for every
seed, the process or the GPU's state does. Not a gate; GPU only:

    python benchmarks/process_offset_probe.py --op rope --case decode_q_64x128 --processes 6 --out DIR
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


def _child(args: argparse.Namespace) -> dict:
    import torch

    from ferret.bench import guards
    from ferret.bench.process import Clock, Slots, load_function
    from ferret.contract.imports import load_entry, project_root_of
    from ferret.contract.load import load_contract
    from ferret.gate.inputs import draw_inputs, output_specs

    contract_path = REPO / "contracts" / f"{args.op}.yaml"
    contract = load_contract(contract_path)
    case = next(c for c in contract.cases_for("gpu") if c.name == args.case)
    candidate_file = sorted((REPO / "tasks" / args.op / "candidates").glob("triton_*.py"))[0]
    fns = {
        "candidate": load_function(str(candidate_file), contract.candidate_abi.entry, "probe_candidate"),
        "eager": load_entry(contract.baseline.entry, project_root_of(contract_path)),
    }
    fns["compiled"] = torch.compile(fns["eager"])
    dtype = contract.primary_dtype
    peaks = guards.peaks_for(torch.cuda.get_device_name(0)) or {"l2_bytes": 64 << 20}
    clock = Clock(on_gpu=True, l2_bytes=peaks["l2_bytes"])
    clock.calibrate()
    record: dict = {"sm_khz_before": clock.cycles_per_ms, "seeds": {}}
    read_only = [i.name for i in contract.inputs if i.role == "in"]
    specs = output_specs(contract, case, dtype)

    def fresh_outputs() -> dict:
        return {n: torch.empty(s, dtype=d, device="cuda") for n, (s, d) in specs.items()}

    for seed in args.seeds:
        inputs = {k: v.cuda() for k, v in draw_inputs(contract, case, dtype, seed=seed).items()}
        floats = [n for n in read_only if inputs[n].is_floating_point()]
        pool = guards.input_pool(inputs, floats, 2 * peaks["l2_bytes"], generator=torch.Generator().manual_seed(seed))
        row: dict = {}
        for name, fn in fns.items():
            slots = Slots(fn, pool, fresh_outputs, contract.params)
            for _ in range(3):
                slots.call()  # compile and warm up
            clock.sync()
            host = clock.host_ms(slots.call)
            row[name + "_us"] = [round(clock.bench(slots.call, host) * 1e3, 3) for _ in range(3)]
            row[name + "_host_us"] = None if host is None else round(host * 1e3, 1)
        row["candidate_kernel_us"] = round(clock.device_ms(Slots(fns["candidate"], pool, fresh_outputs,
                                                                 contract.params).call) * 1e3, 3)
        record["seeds"][str(seed)] = row
    record["empty_call_us"] = [round(clock.bench(lambda: None, 0.005) * 1e3, 3) for _ in range(3)]
    record.update(_launch_and_time(args, clock, fns["candidate"], pool, fresh_outputs, contract.params))
    clock.calibrate()
    record["sm_khz_after"] = clock.cycles_per_ms
    return record


def _launch_and_time(args: argparse.Namespace, clock, candidate, pool: list[dict], fresh_outputs, params: dict) -> dict:
    """What separates the hypotheses left by the first run (2026-12-01): one tiny torch kernel between the same
    events (does a single launch's overhead move with the candidate?), the candidate without the L2 flush before
    each call (does the flush's write-back set the offset?), its kernels per call, and its time sampled
    `--over-time` times, 1.5 s apart, in this one process (does the offset move inside a process?); and the
    candidate behind the spin eager gets (eager, launched in ~0.4 ms, held steady in the checks while it moved)."""
    import time

    import torch

    from ferret.bench.process import Slots, device_us_per_kernel

    tiny = torch.zeros(1, device="cuda")
    slots = Slots(candidate, pool, fresh_outputs, params)
    host = clock.host_ms(slots.call)

    def unflushed_us() -> float:
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(200)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(200)]
        clock.sync()
        for start, end in zip(starts, ends, strict=True):
            clock.spin(0.0 if host is None else 1.5 * host + 0.02)
            start.record()
            slots.call()
            end.record()
        clock.sync()
        return statistics.median(a.elapsed_time(b) for a, b in zip(starts, ends, strict=True)) * 1e3

    over_time, gpu_state = [], []
    for _ in range(args.over_time):
        over_time.append(round(clock.bench(slots.call, host) * 1e3, 3))
        gpu_state.append(_gpu_state())
        time.sleep(1.5)
    return {
        "one_torch_kernel_us": [round(clock.bench(lambda: tiny.add_(1), 0.02) * 1e3, 3) for _ in range(3)],
        "candidate_unflushed_us": [round(unflushed_us(), 3) for _ in range(3)],
        # the spin eager gets (its launch time is ~0.4 ms): is the offset gone when the GPU is held as long?
        "candidate_long_spin_us": [round(clock.bench(slots.call, 0.4) * 1e3, 3) for _ in range(3)],
        "candidate_kernels_per_call": {k: round(v, 3) for k, v in device_us_per_kernel(slots.call, clock, 10).items()},
        "candidate_over_time_us": over_time,
        "gpu_state_over_time": gpu_state,
    }


GPU_STATE = "temperature.gpu,temperature.memory,clocks.sm,clocks.mem,clocks.gr,power.draw,pstate"


def _gpu_state() -> str:
    """nvidia-smi's temperatures (core, HBM), clocks, power and performance state, right after a timed round: does
    the offset follow the HBM's temperature (refresh) or a clock that the spin kernel does not read?"""
    done = subprocess.run(["nvidia-smi", f"--query-gpu={GPU_STATE}", "--format=csv,noheader"], capture_output=True,
                          text=True, check=False)
    return done.stdout.strip() or done.stderr.strip()[:200]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--op", default="rope")
    parser.add_argument("--case", default="decode_q_64x128")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--processes", type=int, default=6)
    parser.add_argument("--over-time", type=int, default=8, help="candidate times sampled 1.5 s apart in each process")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(_child(args)))
        return 0
    import torch
    import triton

    rows = []
    if args.out:  # each process's row is written as it comes: a run stopped by a time limit keeps what it measured
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"process-offset-{args.op}-{args.case}.jsonl").write_text("")
    for index in range(args.processes):
        command = [sys.executable, __file__, "--child", "--op", args.op, "--case", args.case,
                   "--seeds", *map(str, args.seeds), "--over-time", str(args.over_time)]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode:
            print(done.stderr[-3000:], file=sys.stderr)
            return done.returncode
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(f"process {index}: {rows[-1]}", flush=True)
        if args.out:
            with (args.out / f"process-offset-{args.op}-{args.case}.jsonl").open("a") as rows_file:
                rows_file.write(json.dumps(rows[-1]) + "\n")
    result = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "device": torch.cuda.get_device_name(0),
        "versions": {"torch": torch.__version__, "triton": triton.__version__, "python": sys.version.split()[0]},
        "command": "python benchmarks/process_offset_probe.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "processes": rows,
        "candidate_median_us_by_seed": {
            seed: [statistics.median(r["seeds"][seed]["candidate_us"]) for r in rows] for seed in map(str, args.seeds)},
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        (args.out / f"process-offset-{args.op}-{args.case}.json").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
