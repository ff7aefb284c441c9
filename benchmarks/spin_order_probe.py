"""Does the spin before a timed call change a short kernel's time? (issue 11 §3, rmsnorm decode_64x7168)

    PYTHONPATH=$PWD python benchmarks/spin_order_probe.py --out DIR [--rounds 3] [--calls 150]

The judge's clock (`ferret.bench.process.Clock`) flushes the L2, spins the GPU long enough to cover the call's host
launch time, then times the call between two events. On the H200 (2026-12-02, session 8 call 2) rmsnorm decode's
candidate read 4.84-5.51 us in rounds timed behind spins of 0-54 us and 5.47-5.66 us behind spins of 121-297 us, so
a check whose rounds got different spins was unstable. This probe times the honest candidate, the eager baseline and
its torch.compile at decode_64x7168 in one process, behind spins of 0 to 400 us, in two orders:
  flush_spin  the clock's order then: flush, spin, start event, call, end event
  spin_flush  spin, flush, start event, call, end event (the call always right behind the flush)
interleaved over rounds (each round visits every (order, spin, implementation) once), median of `--calls` calls each,
inputs and outputs rotated over 4 and 5 sets as the timer does. Writes DIR/spin-order-probe.json and prints a table.
A probe, not a gate.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
SPINS_MS = (0.0, 0.025, 0.05, 0.1, 0.2, 0.4)
ORDERS = ("flush_spin", "spin_flush")


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.run


def _implementations() -> dict:
    candidate = _load(REPO / "tasks" / "rmsnorm" / "candidates" / "triton_rmsnorm.py", "probe_candidate")
    baseline = _load(REPO / "tasks" / "rmsnorm" / "baseline.py", "probe_baseline")
    return {"candidate": candidate, "eager": baseline, "torch.compile": torch.compile(baseline)}


def _rotating_call(run, m: int = 64, n: int = 7168):
    """A call of `run` that takes the next of 4 input sets and the next of 5 output buffers each time."""
    pool = [{"x": torch.randn(m, n, device="cuda", dtype=torch.bfloat16),
             "weight": torch.rand(n, device="cuda", dtype=torch.bfloat16) + 0.5} for _ in range(4)]
    outs = [{"y": torch.empty(m, n, device="cuda", dtype=torch.bfloat16)} for _ in range(5)]
    state = {"k": 0}

    def call() -> None:
        k = state["k"]
        state["k"] = k + 1
        run(pool[k % 4], outs[k % 5], {"eps": 1e-6})

    return call


def _timed_median_us(call, clock, order: str, spin_ms: float, calls: int) -> tuple[float, float]:
    """Median event time (us) of the calls whose launches were all queued before their start event ran, and the
    fraction that were not."""
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(calls)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(calls)]
    ahead = []
    torch.cuda.synchronize()
    for start, end in zip(starts, ends, strict=True):
        if order == "flush_spin":
            clock.flush_buffer.zero_()
            clock.spin(spin_ms)
        else:
            clock.spin(spin_ms)
            clock.flush_buffer.zero_()
        start.record()
        call()
        end.record()
        ahead.append(not start.query())
    torch.cuda.synchronize()
    times = [s.elapsed_time(e) * 1e3 for s, e, a in zip(starts, ends, ahead, strict=True) if a]
    return statistics.median(times or [s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends, strict=True)]), \
        1 - len(times) / calls


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=150)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO))
    from ferret.bench.process import Clock

    clock = Clock(on_gpu=True, l2_bytes=torch.cuda.get_device_properties(0).L2_cache_size)
    calls = {name: _rotating_call(run) for name, run in _implementations().items()}
    for call in calls.values():  # compile and warm up
        for _ in range(10):
            call()
    clock.calibrate()
    rows = []
    started = time.perf_counter()
    for round_index in range(args.rounds):
        for order in ORDERS:
            for spin_ms in SPINS_MS:
                for name, call in calls.items():
                    us, late = _timed_median_us(call, clock, order, spin_ms, args.calls)
                    rows.append({"round": round_index, "order": order, "spin_us": spin_ms * 1e3, "impl": name,
                                 "median_us": us, "late": late})
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "spin-order-probe.json").write_text(json.dumps({"device": torch.cuda.get_device_name(),
                                                                "flush_ms": clock.flush_ms, "rows": rows}, indent=1))
    print(f"{torch.cuda.get_device_name()}, flush {clock.flush_ms * 1e3:.1f} us, {time.perf_counter() - started:.0f} s")
    print("| order | spin (us) | " + " | ".join(f"{n} rounds (us)" for n in calls) + " |")
    print("| --- | --- | " + " | ".join("---" for _ in calls) + " |")
    for order in ORDERS:
        for spin_ms in SPINS_MS:
            cells = []
            for name in calls:
                got = [r["median_us"] for r in rows if r["order"] == order and r["spin_us"] == spin_ms * 1e3
                       and r["impl"] == name]
                cells.append(", ".join(f"{v:.2f}" for v in got))
            print(f"| {order} | {spin_ms * 1e3:.0f} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
