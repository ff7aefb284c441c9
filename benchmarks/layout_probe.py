"""Does a process's address-space layout set the per-process offset of a short baseline? Fresh processes per mode.

On the H200 (benchmarks/results/2026-12-01-h200-session4/), eager rope decode (about 20 kernels, each loaded on
first use) read 76-78 us in two processes and 72 us in two others, however the flush buffer, stream or CPU was
chosen; inside one process, moving a kernel's code or data to another GPU address moved a tiny kernel by up to
0.55 us. GPU addresses share one address space with the host's (unified addressing), so the host's randomized
layout (ASLR) may decide where the driver puts code and data. Each mode starts `--processes` fresh processes:

- `default`: as the judge starts a process today;
- `fixed`: the host layout not randomized (personality ADDR_NO_RANDOMIZE, inherited through exec) and
  PYTHONHASHSEED=0: the same layout in every process;
- `eager_load`: CUDA_MODULE_LOADING=EAGER, every kernel loaded at start in one order;
- `fixed_eager_load`: both;
- `read_flush`: the L2 flushed by reading the flush buffer (clean lines left in L2), not by writing it (dirty lines
  the timed call's misses must write back first).

Each process records the GPU addresses of its first allocations (are they the same in every process?) and times
eager rope decode and one tiny kernel with the judge's clock. If `fixed` gives one time in every process where
`default` gives several, the layout is the cause, and the judge can start its timing processes so.

    python benchmarks/layout_probe.py --processes 4 --out DIR
"""

from __future__ import annotations

import argparse
import ctypes
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
ADDR_NO_RANDOMIZE = 0x0040000
MODES = {
    "default": ({}, False),
    "fixed": ({"PYTHONHASHSEED": "0"}, True),
    "eager_load": ({"CUDA_MODULE_LOADING": "EAGER"}, False),
    "fixed_eager_load": ({"PYTHONHASHSEED": "0", "CUDA_MODULE_LOADING": "EAGER"}, True),
    "read_flush": ({"FERRET_PROBE_FLUSH": "read"}, False),
}


class _ReadFlush:
    """The clock's flush buffer, flushed by reading it (a reduction) instead of writing zeros: L2 left full of clean
    lines, not dirty ones. Does the timed call's offset come from writing the flush's dirty lines back?"""

    def __init__(self, buffer):
        self.buffer = buffer.view(-1).view(__import__("torch").float32).zero_()

    def zero_(self):
        return self.buffer.sum()

    def data_ptr(self) -> int:
        return self.buffer.data_ptr()


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
    if os.environ.get("FERRET_PROBE_FLUSH") == "read":
        clock.flush_buffer = _ReadFlush(clock.flush_buffer)
    clock.calibrate()
    dtype = contract.primary_dtype
    inputs = {k: v.cuda() for k, v in draw_inputs(contract, case, dtype, seed=1).items()}
    read_only = [i.name for i in contract.inputs if i.role == "in"]
    floats = [n for n in read_only if inputs[n].is_floating_point()]
    pool = guards.input_pool(inputs, floats, 2 * peaks["l2_bytes"], generator=torch.Generator().manual_seed(1))
    specs = output_specs(contract, case, dtype)

    def fresh_outputs() -> dict:
        return {n: torch.empty(s, dtype=d, device="cuda") for n, (s, d) in specs.items()}

    slots = Slots(eager, pool, fresh_outputs, contract.params)
    for _ in range(3):
        slots.call()
    host = clock.host_ms(slots.call)
    tiny = torch.zeros(1, device="cuda")
    return {
        "host_object_address": hex(id(object())),
        "flush_buffer_address": hex(clock.flush_buffer.data_ptr()),
        "first_input_address": hex(next(iter(pool[0].values())).data_ptr()),
        "flush_us": round(clock.flush_ms * 1e3, 2),
        "eager_us": [round(clock.bench(slots.call, host) * 1e3, 3) for _ in range(args.rounds)],
        "tiny_us": [round(clock.bench(lambda: tiny.add_(1), 0.02) * 1e3, 3) for _ in range(args.rounds)],
    }


def _no_randomize() -> None:
    ctypes.CDLL(None, use_errno=True).personality(ADDR_NO_RANDOMIZE)


def _run_child(mode: str, args: argparse.Namespace) -> dict:
    env_extra, fixed = MODES[mode]
    command = [sys.executable, __file__, "--child", "--op", args.op, "--case", args.case, "--rounds", str(args.rounds)]
    done = subprocess.run(command, capture_output=True, text=True, check=False, env={**os.environ, **env_extra},
                          preexec_fn=_no_randomize if fixed else None)
    if done.returncode:
        return {"error": done.stderr[-2000:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def _summary(rows: list[dict]) -> dict:
    medians = [statistics.median(r["eager_us"]) for r in rows if "eager_us" in r]
    tiny = [statistics.median(r["tiny_us"]) for r in rows if "tiny_us" in r]

    def spread(xs: list[float]) -> float | None:
        return round(100 * (max(xs) - min(xs)) / min(xs), 2) if xs else None

    return {"eager_medians_us": medians, "eager_spread_pct": spread(medians), "tiny_medians_us": tiny,
            "tiny_spread_pct": spread(tiny),
            "distinct_flush_addresses": len({r.get("flush_buffer_address") for r in rows})}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--op", default="rope")
    parser.add_argument("--case", default="decode_q_64x128")
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--modes", nargs="+", default=list(MODES))
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(_child(args)))
        return 0
    import torch
    import triton

    result: dict = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                    "device": torch.cuda.get_device_name(0),
                    "versions": {"torch": torch.__version__, "triton": triton.__version__, "python": sys.version.split()[0]},
                    "command": "python benchmarks/layout_probe.py " + " ".join(argv if argv is not None else sys.argv[1:]),
                    "modes": {}}
    # Modes interleaved process by process: a drift of the GPU's state over the run falls on every mode alike.
    rows: dict[str, list[dict]] = {mode: [] for mode in args.modes}
    for index in range(args.processes):
        for mode in args.modes:
            rows[mode].append(_run_child(mode, args))
            print(f"{mode} process {index}: {rows[mode][-1]}", flush=True)
    for mode in args.modes:
        result["modes"][mode] = {"summary": _summary(rows[mode]), "processes": rows[mode]}
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "layout-probe.json").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
