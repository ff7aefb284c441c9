"""Why torch.compile's baseline moves between fresh machines: compile the baseline several times, each time into
an empty compile cache, alone on the GPU or beside a busy GPU, and compare the launch configurations inductor
picked (its `.best_config` files) and the compiled baseline's time.

    PYTHONPATH=/tmp/site:$PWD python benchmarks/compile_picks_probe.py --out DIR [--op mla_attention]
        [--alone 3] [--contended 2] [--rounds 5]

Each trial is one process with its own empty TORCHINDUCTOR_CACHE_DIR: it compiles the contract's baseline and
calls it once per speed case (inductor's autotuning times its launch configurations there). In a `contended`
trial another process keeps the GPU busy (bf16 matmuls and copies) during that first call, as the candidate's
correctness run does beside a cold check's reference timer. The busy process is stopped before the trial times
the compiled baseline and the eager one (the judge's clock: L2 flushed, median of rounds) and takes the profiler's
per-kernel breakdown of the compiled call. DIR/compile-picks.json keeps every trial's picks and times;
DIR/compile-picks.md the kernels whose picks differ between trials. GPU only; a probe, not a gate.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def busy_gpu(ready: Path) -> None:
    """Keep the GPU busy until killed: large bf16 matmuls and a 1 GiB copy, in turn."""
    import torch

    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    src = torch.empty(1 << 30, dtype=torch.int8, device="cuda")
    dst = torch.empty_like(src)
    ready.write_text("busy\n")
    while True:
        for _ in range(4):
            a @ a
        dst.copy_(src)
        torch.cuda.synchronize()


def _wait_for(path: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear within {timeout_s} s")
        time.sleep(0.05)


def trial(op: str, folder: Path, rounds: int) -> None:
    """One trial's process (TORCHINDUCTOR_CACHE_DIR set by the parent): compile and autotune, say so, wait for
    the go, then time."""
    sys.path.insert(0, str(REPO))
    import torch

    from ferret.bench import guards
    from ferret.bench.process import Clock, Slots, kernel_breakdown
    from ferret.contract.imports import load_entry, project_root_of
    from ferret.contract.task import Task
    from ferret.gate.inputs import draw_inputs, output_specs

    path = REPO / "contracts" / f"{op}.yaml"
    contract = Task.load(path).contract
    baseline = load_entry(contract.baseline.entry, project_root_of(path))
    compiled = torch.compile(baseline)
    peaks = guards.peaks_for(torch.cuda.get_device_name(0))
    l2_bytes = peaks["l2_bytes"] if peaks else 64 << 20
    clock = Clock(True, l2_bytes)
    read_only = [i.name for i in contract.inputs if i.role == "in"]
    dtype = contract.primary_dtype
    cases = [c for c in contract.cases_for("gpu") if c.name in contract.speed.cases]
    slots, first_call_s = {}, {}
    for case in cases:
        inputs = draw_inputs(contract, case, dtype)
        pool = guards.input_pool({k: v.cuda() for k, v in inputs.items()},
                                 [n for n in read_only if inputs[n].is_floating_point()], 2 * l2_bytes)
        specs = output_specs(contract, case, dtype)

        def fresh_outputs(specs=specs) -> dict:
            return {n: torch.empty(s, dtype=d, device="cuda") for n, (s, d) in specs.items()}

        slots[case.name] = {name: Slots(fn, pool, fresh_outputs, dict(contract.params))
                            for name, fn in (("eager", baseline), ("compile", compiled))}
        started = time.perf_counter()
        slots[case.name]["compile"].call()  # compile and autotune, beside whatever the parent runs
        torch.cuda.synchronize()
        first_call_s[case.name] = time.perf_counter() - started
    (folder / "autotuned").write_text("done\n")
    _wait_for(folder / "go", 600)
    clock.calibrate()
    timed = {}
    for name, by_impl in slots.items():
        for slot in by_impl.values():
            slot.call()
        host = {impl: clock.host_ms(slot.call) for impl, slot in by_impl.items()}
        samples: dict[str, list[float]] = {impl: [] for impl in by_impl}
        for _ in range(rounds):
            for impl, slot in by_impl.items():
                guards.reset_persisting_l2()
                samples[impl].append(clock.bench(slot.call, host[impl]) * 1e3)
        timed[name] = {"median_us": {impl: statistics.median(v) for impl, v in samples.items()},
                       "rounds_us": samples, "first_call_s": first_call_s[name],
                       "compiled_kernels_us": kernel_breakdown(by_impl["compile"].call, clock)}
    (folder / "timed.json").write_text(json.dumps(timed, indent=1) + "\n")


def picks(cache: Path) -> dict[str, dict]:
    """Every `.best_config` under the cache, by file name: inductor names it by the kernel source's hash, so one kernel
    has one name in every trial (which kernel it is, the per-kernel device times in `compiled_kernels_us` say)."""
    return {config.name: {"config": json.loads(config.read_text())} for config in sorted(cache.rglob("*.best_config"))}


def run_trial(op: str, out: Path, label: str, contended: bool, rounds: int) -> dict:
    folder = out / label
    folder.mkdir(parents=True)
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(folder / "inductor")}
    busy = None
    if contended:
        busy = subprocess.Popen([sys.executable, __file__, "--busy", str(folder / "busy")], env=env)
        _wait_for(folder / "busy", 120)
    child = subprocess.Popen([sys.executable, __file__, "--trial", str(folder), "--op", op, "--rounds", str(rounds)],
                             env=env)
    try:
        while not (folder / "autotuned").exists():
            if child.poll() is not None:
                raise RuntimeError(f"trial {label} ended with {child.returncode} before autotuning finished")
            time.sleep(0.05)
    finally:
        if busy is not None:
            busy.kill()
            busy.wait()
    (folder / "go").write_text("go\n")
    if child.wait(timeout=900) != 0:
        raise RuntimeError(f"trial {label} ended with {child.returncode}")
    timed = json.loads((folder / "timed.json").read_text())
    return {"label": label, "contended": contended, "timed": timed, "picks": picks(folder / "inductor")}


def differing(trials: list[dict]) -> list[str]:
    """A line per kernel whose pick is not the same in every trial."""
    names = sorted({name for t in trials for name in t["picks"]})
    lines = []
    for name in names:
        seen = [json.dumps(t["picks"].get(name, {}).get("config"), sort_keys=True) for t in trials]
        if len(set(seen)) > 1:
            lines.append(f"- {name}: " + "; ".join(f"{t['label']}: {s}" for t, s in zip(trials, seen, strict=True)))
    return lines


def table(trials: list[dict]) -> str:
    cases = list(trials[0]["timed"])
    lines = ["| trial | " + " | ".join(f"{c} compile / eager (us)" for c in cases) + " |",
             "| --- |" + " --- |" * len(cases)]
    for t in trials:
        cells = [f"{t['timed'][c]['median_us']['compile']:.1f} / {t['timed'][c]['median_us']['eager']:.1f}" for c in cases]
        lines.append(f"| {t['label']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--op", default="mla_attention")
    parser.add_argument("--alone", type=int, default=3)
    parser.add_argument("--contended", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--trial", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--busy", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.busy:
        busy_gpu(args.busy)
        return 0
    if args.trial:
        trial(args.op, args.trial, args.rounds)
        return 0
    import torch

    args.out.mkdir(parents=True, exist_ok=True)
    plan = [(f"alone-{k}", False) for k in range(args.alone)] + [(f"contended-{k}", True) for k in range(args.contended)]
    trials = []
    for label, contended in plan:  # alone and contended alternate would mix orders; kept in blocks, said in the file
        trials.append(run_trial(args.op, args.out, label, contended, args.rounds))
        print(f"{label}: " + ", ".join(f"{c} {v['median_us']['compile']:.1f} us" for c, v in trials[-1]["timed"].items()),
              file=sys.stderr, flush=True)
        meta = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                "device": torch.cuda.get_device_name(0), "torch": torch.__version__,
                "command": "python benchmarks/compile_picks_probe.py " + " ".join(argv if argv is not None else sys.argv[1:])}
        (args.out / "compile-picks.json").write_text(json.dumps({**meta, "trials": trials}, indent=1) + "\n")
        (args.out / "compile-picks.md").write_text(f"{meta}\n\n{table(trials)}\n\nPicks that differ:\n"
                                                   + "\n".join(differing(trials) or ["(none)"]) + "\n")
    print((args.out / "compile-picks.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
