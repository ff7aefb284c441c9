"""Why does a candidate's judged time differ from its synchronized wall time? One case, several clocks.

The judge times with triton.testing.do_bench: L2 flushed before every call, a rotating pool of input sets,
median. When that time and the synchronized wall time of back-to-back calls disagree (as the MLA tp8 case
did on the H200 in benchmarks/results/2026-11-29-h200-run9/), this probe times the same candidate on the
same case in one process, under each condition, and breaks the call into its kernels with torch.profiler:

    python benchmarks/timing_probe.py --op mla_attention --case tp8_b32_l8192 [--out DIR]

Not a gate: it loads the candidate in its own process and checks nothing. GPU only.
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


def _kernel_times(profile) -> dict[str, float]:
    """Total device microseconds per kernel name."""
    totals: dict[str, float] = {}
    for event in profile.key_averages():
        device_us = getattr(event, "device_time_total", None)
        if device_us is None:
            device_us = getattr(event, "cuda_time_total", 0.0)
        # Operator rows (aten::..., cuda...) repeat their kernels' time: kernels only.
        if device_us and not event.key.startswith(("aten::", "cuda", "ProfilerStep")):
            totals[event.key[:80]] = totals.get(event.key[:80], 0.0) + float(device_us)
    return totals


def _sleep_cycles_per_ms(torch) -> float:
    """GPU clock cycles of torch.cuda._sleep per millisecond, measured with events."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(1_000_000)
    start.record()
    torch.cuda._sleep(20_000_000)
    end.record()
    torch.cuda.synchronize()
    return 20_000_000 / start.elapsed_time(end)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--op", default="mla_attention")
    parser.add_argument("--case", default="tp8_b32_l8192")
    parser.add_argument("--candidate", default=None, help="default: the op's committed Triton candidate")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)

    import torch
    import triton
    import triton.testing

    from ferret.bench import guards
    from ferret.contract.imports import load_entry, project_root_of
    from ferret.contract.load import load_contract
    from ferret.gate.inputs import draw_inputs, output_specs

    contract_path = REPO / "contracts" / f"{args.op}.yaml"
    contract = load_contract(contract_path)
    case = next(c for c in contract.cases_for("gpu") if c.name == args.case)
    candidate_file = args.candidate or sorted((REPO / "tasks" / args.op / "candidates").glob("triton_*.py"))[0]
    from ferret.bench.process import load_function

    candidate = load_function(str(candidate_file), contract.candidate_abi.entry, "probe_candidate")
    baseline = load_entry(contract.baseline.entry, project_root_of(contract_path))
    dtype = contract.primary_dtype
    inputs = {k: v.cuda() for k, v in draw_inputs(contract, case, dtype).items()}
    device_name = torch.cuda.get_device_name(0)
    peaks = guards.peaks_for(device_name) or {"l2_bytes": 64 << 20}
    read_only = [i.name for i in contract.inputs if i.role == "in"]
    pool = guards.input_pool(inputs, [n for n in read_only if inputs[n].is_floating_point()], 2 * peaks["l2_bytes"])
    specs = output_specs(contract, case, dtype)
    outs = [{n: torch.empty(s, dtype=d, device="cuda") for n, (s, d) in specs.items()} for _ in range(len(pool) + 1)]
    params = contract.params

    def rotating(fn):
        counter = iter(range(10**9))

        def call():
            k = next(counter)
            fn(pool[k % len(pool)], outs[k % len(outs)], params)

        return call

    def fixed(fn):
        return lambda: fn(pool[0], outs[0], params)

    def back_to_back_ms(call, n=100) -> tuple[float, float]:
        """(event ms per call, synchronized wall ms per call) over n calls with no flush between them."""
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        began = time.perf_counter()
        start.record()
        for _ in range(n):
            call()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / n, (time.perf_counter() - began) * 1e3 / n

    def profiled(call, flush: bool, n=20) -> dict[str, float]:
        cache = torch.empty(int(peaks["l2_bytes"] * 4), dtype=torch.int8, device="cuda")
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(n):
                if flush:
                    cache.zero_()
                call()
            torch.cuda.synchronize()
        return {k: v / n for k, v in _kernel_times(prof).items()}

    flush_buffer = torch.empty(int(peaks["l2_bytes"] * 4), dtype=torch.int8, device="cuda")
    cycles_per_ms = _sleep_cycles_per_ms(torch)

    def host_ms_per_call(call, n=10) -> float:
        """CPU time to enqueue one call while the GPU is held busy (nothing waits on the GPU)."""
        torch.cuda.synchronize()
        torch.cuda._sleep(int(cycles_per_ms * 200))
        began = time.perf_counter()
        for _ in range(n):
            call()
        host = (time.perf_counter() - began) * 1e3 / n
        torch.cuda.synchronize()
        return host

    def queue_filled_ms(call, host_ms: float, n=200) -> float:
        """Median event time per call with the launch queue kept ahead of the GPU: flush, then a GPU sleep at
        least as long as the host's enqueue time, then the timed call (host launch time out of the window)."""
        sleep = int(cycles_per_ms * (host_ms + 0.02))
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        torch.cuda.synchronize()
        for i in range(n):
            flush_buffer.zero_()
            torch.cuda._sleep(sleep)
            starts[i].record()
            call()
            ends[i].record()
        torch.cuda.synchronize()
        return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))

    fns = {"candidate": candidate, "baseline": baseline}
    for fn in fns.values():  # compile and warm up
        fixed(fn)()
    torch.cuda.synchronize()
    rows: dict[str, dict[str, list[float]]] = {name: {} for name in fns}
    for _ in range(args.rounds):
        for name, fn in fns.items():
            guards.reset_persisting_l2()
            measures = rows[name]
            measures.setdefault("do_bench rotating pool (the judge)", []).append(
                float(triton.testing.do_bench(rotating(fn), warmup=25, rep=100, return_mode="median")))
            measures.setdefault("do_bench one input set", []).append(
                float(triton.testing.do_bench(fixed(fn), warmup=25, rep=100, return_mode="median")))
            host = host_ms_per_call(rotating(fn))
            measures.setdefault("host enqueue ms per call (GPU held)", []).append(host)
            measures.setdefault("queue-filled events, rotating, flush", []).append(queue_filled_ms(rotating(fn), host))
            measures.setdefault("round ended (unix s)", []).append(time.time())
            event_ms, wall_ms = back_to_back_ms(rotating(fn))
            measures.setdefault("back-to-back events, rotating, no flush", []).append(event_ms)
            measures.setdefault("back-to-back synchronized wall, rotating", []).append(wall_ms)
    kernels = {
        "flushed before each call": profiled(rotating(candidate), flush=True),
        "back to back": profiled(rotating(candidate), flush=False),
    }
    result = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "device": device_name,
        "versions": {"torch": torch.__version__, "triton": triton.__version__, "python": sys.version.split()[0]},
        "command": "python benchmarks/timing_probe.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "op": args.op,
        "case": args.case,
        "dtype": dtype,
        "candidate": str(Path(candidate_file).resolve().relative_to(REPO)) if str(candidate_file).startswith(str(REPO)) else str(candidate_file),
        "pool_sets": len(pool),
        "ms": rows,
        "median_ms": {name: {k: statistics.median(v) for k, v in m.items()} for name, m in rows.items()},
        "candidate_kernels_us_per_call": kernels,
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"timing-probe-{args.op}-{args.case}.json").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
