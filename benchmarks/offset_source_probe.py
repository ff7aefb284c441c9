"""What inside a process sets a small kernel's time offset? Varies, inside each of several fresh processes, one
thing a process fixes once, and sees whether that alone spreads the time as far as the processes spread it.

The H200 runs of 2026-12-01 (benchmarks/results/2026-12-01-h200-session3/) showed rope decode_q_64x128's candidate
and even one plain torch kernel (`tiny.add_(1)`) reading 3.94 to 4.48 us in different processes, steady within
0.06 us inside each; an empty call between the same events did not move; not the flush, the spin, the clocks or
the temperature. Things a process fixes once, varied here inside one process (the judge's clock throughout,
`ferret.bench.process.Clock`, 3 rounds each, medians in us):

- `streams`: the tiny kernel on each of several new CUDA streams (each can map to another hardware channel);
- `addresses`: the tiny kernel on tensors at several addresses, spaced by odd sizes of allocated gap;
- `code_copies`: the rope candidate loaded as several separate modules: each holds its own loaded copy of the
  same compiled kernel, at another code address;
- `cpus`: the tiny kernel with the process pinned to each of several CPUs in turn;
- `flush_buffers` (after the first run, where eager rope moved 3% between processes in one call, and every one of
  its ~20 kernels has code of its own): the tiny kernel and the eager rope baseline behind each of several L2 flush
  buffers, each a separate allocation (the flush leaves L2 full of its dirty lines, which the timed call's misses
  must write back);

If one of these spreads the time inside a process as far as the processes differ, it is the cause's candidate.
Not a gate; GPU only:

    python benchmarks/offset_source_probe.py --processes 4 --out DIR
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _rounds_us(clock, fn, rounds: int = 3) -> float:
    """The judge's event clock, median of `rounds` rounds; spin as for a call whose host launch takes 20 us."""
    return round(statistics.median(clock.bench(fn, 0.02) * 1e3 for _ in range(rounds)), 3)


def _streams(clock, count: int) -> list[float]:
    import torch

    tiny = torch.zeros(1, device="cuda")
    times = []
    for _ in range(count):
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            times.append(_rounds_us(clock, lambda: tiny.add_(1)))
        torch.cuda.synchronize()
    return times


def _addresses(clock, count: int) -> list[float]:
    import torch

    keep, times = [], []
    for index in range(count):
        keep.append(torch.empty((index * 7919 + 1) * 4096 + 257, dtype=torch.int8, device="cuda"))  # an odd gap
        tiny = torch.zeros(1, device="cuda")
        keep.append(tiny)
        times.append(_rounds_us(clock, lambda t=tiny: t.add_(1)))
    return times


def _rope_decode() -> tuple:
    """rope decode_q_64x128 on the GPU, as the judge's timer holds it: the contract, its file, a pool of input sets
    over 2x the L2 and fresh output buffers."""
    import torch

    from ferret.bench import guards
    from ferret.contract.load import load_contract
    from ferret.gate.inputs import draw_inputs, output_specs

    contract_path = REPO / "contracts" / "rope.yaml"
    contract = load_contract(contract_path)
    case = next(c for c in contract.cases_for("gpu") if c.name == "decode_q_64x128")
    dtype = contract.primary_dtype
    inputs = {k: v.cuda() for k, v in draw_inputs(contract, case, dtype, seed=1).items()}
    floats = [i.name for i in contract.inputs if i.role == "in" and inputs[i.name].is_floating_point()]
    pool = guards.input_pool(inputs, floats, 2 * (60 << 20), generator=torch.Generator().manual_seed(1))
    specs = output_specs(contract, case, dtype)

    def fresh_outputs() -> dict:
        return {n: torch.empty(s, dtype=d, device="cuda") for n, (s, d) in specs.items()}

    return contract, contract_path, pool, fresh_outputs


def _code_copies(clock, count: int) -> dict:
    from ferret.bench.process import Slots, load_function

    contract, _, pool, fresh_outputs = _rope_decode()
    candidate_file = REPO / "tasks" / "rope" / "candidates" / "triton_rope.py"
    times = []
    for index in range(count):
        fn = load_function(str(candidate_file), contract.candidate_abi.entry, f"probe_copy_{index}")
        slots = Slots(fn, pool, fresh_outputs, contract.params)
        for _ in range(3):
            slots.call()
        times.append(_rounds_us(clock, slots.call))
    return {"times": times}


def _cpus(clock, count: int) -> dict:
    import torch

    tiny = torch.zeros(1, device="cuda")
    allowed = sorted(os.sched_getaffinity(0))
    chosen = allowed[:: max(1, len(allowed) // count)][:count]
    times = {}
    for cpu in chosen:
        os.sched_setaffinity(0, {cpu})
        times[str(cpu)] = _rounds_us(clock, lambda: tiny.add_(1))
    os.sched_setaffinity(0, set(allowed))
    return times


def _flush_buffers(clock, count: int) -> dict:
    import torch

    from ferret.bench.process import Slots
    from ferret.contract.imports import load_entry, project_root_of

    contract, contract_path, pool, fresh_outputs = _rope_decode()
    eager = Slots(load_entry(contract.baseline.entry, project_root_of(contract_path)), pool, fresh_outputs,
                  contract.params)
    eager.call()
    tiny = torch.zeros(1, device="cuda")
    original, buffers = clock.flush_buffer, [clock.flush_buffer]
    buffers += [torch.empty_like(original) for _ in range(count - 1)]
    rows = {"tiny": [], "eager_rope": []}
    for buffer in buffers:
        clock.flush_buffer = buffer
        rows["tiny"].append(_rounds_us(clock, lambda: tiny.add_(1)))
        rows["eager_rope"].append(round(statistics.median(clock.bench(eager.call, 0.5) * 1e3 for _ in range(3)), 3))
    clock.flush_buffer = original
    return rows


def _child(count: int, only_flush: bool) -> dict:
    import torch

    from ferret.bench.process import Clock

    clock = Clock(on_gpu=True, l2_bytes=60 << 20)
    clock.calibrate()
    tiny = torch.zeros(1, device="cuda")
    if only_flush:
        return {"tiny_default_stream_us": _rounds_us(clock, lambda: tiny.add_(1)),
                "flush_buffers": _flush_buffers(clock, count)}
    return {
        "tiny_default_stream_us": _rounds_us(clock, lambda: tiny.add_(1)),
        "empty_call_us": _rounds_us(clock, lambda: None),
        "streams": _streams(clock, count),
        "addresses": _addresses(clock, count),
        "code_copies": _code_copies(clock, count)["times"],
        "cpus": _cpus(clock, count),
        "flush_buffers": _flush_buffers(clock, count),
        "tiny_default_stream_again_us": _rounds_us(clock, lambda: tiny.add_(1)),
    }


def _spread(values: list[float]) -> float:
    return round(max(values) - min(values), 3)


def summary(rows: list[dict]) -> dict:
    """Per thing varied: the largest spread inside one process, against the spread of the processes' own
    default-stream times."""
    inside = {key: max(_spread(list(r[key].values()) if isinstance(r[key], dict) else r[key]) for r in rows)
              for key in ("streams", "addresses", "code_copies", "cpus") if all(key in r for r in rows)}
    if all("flush_buffers" in r for r in rows):
        for what in ("tiny", "eager_rope"):
            inside[f"flush_buffers_{what}"] = max(_spread(r["flush_buffers"][what]) for r in rows)
    between = {"tiny": _spread([r["tiny_default_stream_us"] for r in rows])}
    if all("flush_buffers" in r for r in rows):
        between["eager_rope_first_buffer"] = _spread([r["flush_buffers"]["eager_rope"][0] for r in rows])
    return {"between_processes_us": between, "largest_inside_one_process_us": inside}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--count", type=int, default=6, help="streams, addresses, code copies and CPUs tried each")
    parser.add_argument("--only-flush", action="store_true", help="only the flush-buffer part (and the defaults)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(_child(args.count, args.only_flush)))
        return 0
    import torch
    import triton

    rows = []
    for index in range(args.processes):
        command = [sys.executable, __file__, "--child", "--count", str(args.count)] + (["--only-flush"] * args.only_flush)
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode:
            print(done.stderr[-3000:], file=sys.stderr)
            return done.returncode
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(f"process {index}: {rows[-1]}", flush=True)
    result = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "device": torch.cuda.get_device_name(0),
        "versions": {"torch": torch.__version__, "triton": triton.__version__, "python": sys.version.split()[0]},
        "command": "python benchmarks/offset_source_probe.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "processes": rows,
        "summary": summary(rows),
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "offset-source-probe.json").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
