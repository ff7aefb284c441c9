"""Where each op's honest candidate stands against the physical limit, over its speed cases and a grid around
them: the candidate's time, eager, torch.compile, the roofline floor and the fraction of it reached, with the
geomean and the worst case.

    python benchmarks/roofline_sweep.py [--ops rmsnorm softmax rope mla_attention] [--rounds 5] [--out DIR]

The grid: each speed case, then the same case with one dim halved or doubled at a time. Each case's inputs
are drawn as the gate draws them (its seed), the floor comes from the contract's roofline on those inputs and
the datasheet peaks. Timed with the judge's clock (`ferret.bench.process.Clock`: L2 flushed, launches queued
ahead, median per round), the three implementations interleaved round by round in this one process, median
over rounds. Honest code only, nothing checked: a benchmark, not a gate. GPU only.
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


def grid(contract) -> list:
    """The speed cases, then each with one dim halved or doubled."""
    speed = [c for c in contract.cases_for("gpu") if c.name in contract.speed.cases]
    cases = list(speed)
    for case in speed:
        for dim, value in case.dims.items():
            for factor, tag in ((0.5, "half"), (2, "double")):
                scaled = max(1, int(value * factor))
                if scaled != value:
                    dims = {**case.dims, dim: scaled}
                    cases.append(case.model_copy(update={"name": f"{case.name}:{dim}_{tag}", "dims": dims}))
    return cases


def sweep_op(op: str, rounds: int, deadline: float, log: Path | None) -> list[dict]:
    import torch

    from ferret.bench import guards
    from ferret.bench.process import Clock, Slots, load_function
    from ferret.contract.imports import load_entry, project_root_of
    from ferret.contract.roofline import count_roofline
    from ferret.contract.task import Task
    from ferret.gate.inputs import draw_inputs, output_specs

    path = REPO / "contracts" / f"{op}.yaml"
    contract = Task.load(path).contract
    torch._dynamo.config.cache_size_limit = 64  # one compiled graph per shape of the grid
    baseline = load_entry(contract.baseline.entry, project_root_of(path))
    implementations = {"candidate": load_function(str(REPO / CANDIDATES[op]), contract.candidate_abi.entry, f"sweep_{op}"),
                       "eager": baseline, "compile": torch.compile(baseline)}
    peaks = guards.peaks_for(torch.cuda.get_device_name(0))
    if peaks is None:
        raise SystemExit(f"no datasheet peaks for {torch.cuda.get_device_name(0)} in ferret.bench.guards")
    clock = Clock(True, peaks["l2_bytes"])
    read_only = [i.name for i in contract.inputs if i.role == "in"]
    dtype = contract.primary_dtype
    rows = []
    for case in grid(contract):
        if time.monotonic() > deadline:
            print(f"{op} {case.name}: not timed (out of time)", file=sys.stderr)
            continue
        inputs = draw_inputs(contract, case, dtype)
        work = count_roofline(contract, case.dims, inputs, dtype)
        floor_ms = guards.floor_ms(work.bytes, work.flops, peaks)
        pool = guards.input_pool({k: v.cuda() for k, v in inputs.items()},
                                 [n for n in read_only if inputs[n].is_floating_point()], 2 * peaks["l2_bytes"])
        specs = output_specs(contract, case, dtype)

        def fresh_outputs(specs=specs) -> dict:
            return {n: torch.empty(s, dtype=d, device="cuda") for n, (s, d) in specs.items()}

        slots = {name: Slots(fn, pool, fresh_outputs, dict(contract.params)) for name, fn in implementations.items()}
        for slot in slots.values():
            slot.call()  # compile, autotune
        host = {name: clock.host_ms(slot.call) for name, slot in slots.items()}
        samples: dict[str, list[float]] = {name: [] for name in slots}
        for _ in range(rounds):
            for name, slot in slots.items():
                guards.reset_persisting_l2()
                samples[name].append(clock.bench(slot.call, host[name]))
        med = {name: statistics.median(times) for name, times in samples.items()}
        rows.append({"op": op, "case": case.name, "dims": case.dims, "bytes": work.bytes, "flops": work.flops,
                     "floor_us": floor_ms * 1e3, **{f"{k}_us": v * 1e3 for k, v in med.items()},
                     "fraction_of_floor": floor_ms / med["candidate"], "speedup_vs_eager": med["eager"] / med["candidate"],
                     "speedup_vs_compile": med["compile"] / med["candidate"],
                     "round_spread": {k: (max(v) - min(v)) / statistics.median(v) for k, v in samples.items()}})
        del pool, slots
        torch.cuda.empty_cache()
        if log is not None:  # each row kept as it comes: a call cut short keeps what it measured
            with log.open("a") as out:
                out.write(json.dumps(rows[-1]) + "\n")
        print(f"{op} {case.name}: {rows[-1]['candidate_us']:.1f} us, floor {rows[-1]['floor_us']:.1f} us "
              f"({rows[-1]['fraction_of_floor']:.0%})", file=sys.stderr)
    return rows


def markdown(rows: list[dict]) -> str:
    lines = ["| op | case | candidate us | eager us | torch.compile us | floor us | fraction of floor | x eager | x compile |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r['op']} | {r['case']} | {r['candidate_us']:.1f} | {r['eager_us']:.1f} | {r['compile_us']:.1f} | "
                     f"{r['floor_us']:.1f} | {r['fraction_of_floor']:.1%} | {r['speedup_vs_eager']:.2f} | "
                     f"{r['speedup_vs_compile']:.2f} |")
    for op in dict.fromkeys(r["op"] for r in rows):
        mine = [r for r in rows if r["op"] == op]
        worst = min(mine, key=lambda r: r["fraction_of_floor"])
        lines.append(f"\n{op}: geomean fraction of floor {statistics.geometric_mean(r['fraction_of_floor'] for r in mine):.1%}, "
                     f"geomean x eager {statistics.geometric_mean(r['speedup_vs_eager'] for r in mine):.2f}, "
                     f"geomean x compile {statistics.geometric_mean(r['speedup_vs_compile'] for r in mine):.2f}; "
                     f"worst {worst['case']} at {worst['fraction_of_floor']:.1%} of its floor")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", nargs="+", default=list(CANDIDATES))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--budget-s", type=float, default=1e9, help="no new case is started after this many seconds")
    args = parser.parse_args(argv)

    import torch
    import triton

    deadline = time.monotonic() + args.budget_s
    log = None
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        log = args.out / "roofline-sweep.jsonl"
    rows = [row for op in args.ops for row in sweep_op(op, args.rounds, deadline, log)]
    text = markdown(rows)
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        meta = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "device": torch.cuda.get_device_name(0),
                "versions": {"torch": torch.__version__, "triton": triton.__version__, "python": sys.version.split()[0]},
                "command": "python benchmarks/roofline_sweep.py " + " ".join(argv if argv is not None else sys.argv[1:])}
        (args.out / "roofline-sweep.json").write_text(json.dumps({**meta, "rows": rows}, indent=1) + "\n")
        (args.out / "roofline-sweep.md").write_text(f"{meta}\n\n{text}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
