"""The gate's timing of each op's honest candidate, check after check: speedups, repeatability, check time.

The same honest candidate judged by `ferret check` several times, each check its own process (and so its own
timing processes), on every speed case of every contract.

    python -m benchmarks timing run [--ops mla_attention rmsnorm softmax rope] [--checks 3]
        [--gates-dir DIR] --out DIR [--budget-s 540] [--cpu]    # on a GPU machine (--cpu: a rehearsal)
    python -m benchmarks timing table checks.jsonl              # anywhere: the tables from what came back

`run` judges each op's committed honest candidate (benchmarks/honest_candidates.py): first with the gate
not built yet when the gates folder has none (the cold check: the test-writer builds the gate), then
`--checks` times with the gate warm. Every check is appended to `checks.jsonl` in `--out` as soon as it
ends (the verdict, the wall time, the exit code, the progress tail): a call cut short keeps what it
measured. A check that would not end inside `--budget-s` (estimated from the last check of the same op)
is not started.

`table` prints, for every op and speed case, the candidate's, the eager baseline's and torch.compile's
median of each check and the speedups, with the largest disagreement between checks against a
limit (5%, or 0.5 us, whichever is larger), whether any check marked the case unstable, and the fraction of
the roofline floor; then each check's wall time and where it went (`Verdict.phases`, and the timing
processes' setup, rounds and post). GPU for `run`; not a test.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from benchmarks.honest_candidates import CANDIDATES

REPO = Path(__file__).resolve().parents[1]

LIMIT_FRACTION, LIMIT_MS = 0.05, 0.0005
# A cold check's length before any was seen (H200: MLA 134 s on 2026-11-30, paged MLA 114 s on 2026-12-01).
FIRST_GUESS_S = {"mla_attention": 150.0, "mla_attention_paged": 200.0}


def one_check(op: str, gates_dir: Path, timeout_s: float, cpu: bool = False) -> dict:
    """`ferret check` of the op's honest candidate in a process of its own; its verdict, how long it took, and when
    its first and last progress lines came (`outside_clock`: the seconds before ferret's progress clock started, the
    interpreter and its imports, and after its last line, the process's exit)."""
    verdict_file = Path(f"/tmp/ferret-verdict-{op}-{time.time_ns()}.json")
    command = [
        sys.executable,
        "-m",
        "ferret.cli.main",
        "check",
        str(REPO / "contracts" / f"{op}.yaml"),
        str(REPO / CANDIDATES[op]),
        "--gates-dir",
        str(gates_dir),
        "--verdict-out",
        str(verdict_file),
        "--json",
        *(["--profile", "cpu"] if cpu else []),
    ]
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=REPO)
    timer = threading.Timer(timeout_s, process.kill)
    timer.start()
    lines: list[tuple[float, str]] = []
    try:
        assert process.stderr is not None
        for line in process.stderr:
            lines.append((time.perf_counter() - started, line))
        exit_code = process.wait()
    finally:
        timer.cancel()
    seconds = time.perf_counter() - started
    exit_code = None if exit_code == -9 else exit_code  # killed at the timeout
    stderr = "".join(line for _, line in lines)
    verdict = json.loads(verdict_file.read_text()) if verdict_file.exists() else None
    if verdict is not None:
        # Per-variant metrics are large; only where each variant's seconds went is kept.
        verdict["variant_seconds"] = [
            {"id": v["id"], "seconds": v.get("seconds"), "phases": v.get("phase_seconds", {})}
            for v in verdict.pop("variants", [])
        ]
    outside = outside_clock(lines, seconds)
    return {
        "op": op,
        "seconds": round(seconds, 1),
        "exit": exit_code,
        "stderr_tail": stderr[-3000:],
        "verdict": verdict,
        "outside_clock": outside,
        "compile_choice": [line.strip() for _, line in lines if "torch.compile of the baseline" in line],
    }


def outside_clock(lines: list[tuple[float, str]], seconds: float) -> dict | None:
    """From (arrival, line) of a check's progress lines ("ferret [  2.6s] ..."): the seconds before its progress
    clock started (the first line's arrival less the clock it shows) and after its last line."""
    clocked = [
        (arrival, float(match.group(1))) for arrival, line in lines if (match := re.match(r"ferret \[\s*([0-9.]+)s\]", line))
    ]
    if not clocked:
        return None
    (first_arrival, first_clock), (last_arrival, _) = clocked[0], clocked[-1]
    return {"before_clock_s": round(first_arrival - first_clock, 2), "after_last_line_s": round(seconds - last_arrival, 2)}


def run(args: argparse.Namespace) -> int:
    import torch
    import triton

    args.out.mkdir(parents=True, exist_ok=True)
    log = args.out / "checks.jsonl"
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    meta = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "device": device,
        "versions": {"torch": torch.__version__, "triton": triton.__version__, "python": sys.version.split()[0]},
        "command": "python -m benchmarks timing run " + " ".join(args.argv),
    }
    with log.open("a") as out:
        out.write(json.dumps({"meta": meta}) + "\n")
    began = time.monotonic()
    for op in args.ops:
        estimate, warm, index = FIRST_GUESS_S.get(op, 120.0), 0, 0
        while index == 0 or (warm < args.checks and index <= args.checks):  # --checks 0: the first check only
            left = args.budget_s - (time.monotonic() - began)
            if left < 1.15 * estimate:
                print(f"{op}: check {index} not started ({left:.0f} s left, a check takes ~{estimate:.0f} s)", flush=True)
                break
            gates_before = set(args.gates_dir.glob("*")) if args.gates_dir.exists() else set()
            record = one_check(op, args.gates_dir, timeout_s=left, cpu=args.cpu)
            cold = bool(set(args.gates_dir.glob("*")) - gates_before)  # the check built this op's gate
            record.update(index=index, cold=cold)
            warm, index = warm + (not cold), index + 1
            estimate = record["seconds"] if not cold else estimate * 0.7
            with log.open("a") as out:
                out.write(json.dumps(record) + "\n")
            print(
                f"{op}: check {record['index']}{' (cold gate)' if cold else ''}: exit {record['exit']} in "
                f"{record['seconds']} s; {summary_line(record)}",
                flush=True,
            )
            if record["exit"] != 0:
                print(f"{op}: no more checks (this one did not pass)", flush=True)
                break
    return 0


def summary_line(record: dict) -> str:
    verdict = record["verdict"]
    if verdict is None:
        return "no verdict: " + record["stderr_tail"][-300:].replace("\n", " | ")
    timing = verdict["timing"]
    cases = "; ".join(
        f"{c['case']} {c['candidate_ms'] * 1e3:.1f}/{c['baseline_ms'] * 1e3:.1f}/"
        f"{(c.get('baseline_compiled_ms') or 0) * 1e3:.1f} us" + (" UNSTABLE" if c["unstable"] else "")
        for c in timing["cases"]
    )
    return f"passed {verdict['passed']}, {cases or timing['reason'][:200]}, timing processes {timing.get('process_seconds')}"


def _disagreement(values: list[float], absolute_ms: float | None) -> tuple[float, bool]:
    """(max - min) / min, and whether it is within 5% (or 0.5 us for times, whichever is larger)."""
    low, high = min(values), max(values)
    allowed = LIMIT_FRACTION * low if absolute_ms is None else max(LIMIT_FRACTION * low, absolute_ms)
    return (high - low) / low, high - low <= allowed


QUANTITIES = (
    ("candidate (us)", "candidate_ms", 1e3, LIMIT_MS),
    ("eager (us)", "baseline_ms", 1e3, LIMIT_MS),
    ("torch.compile (us)", "baseline_compiled_ms", 1e3, LIMIT_MS),
    ("x eager", "speedup", 1.0, None),
    ("x compile", "speedup_vs_compiled", 1.0, None),
)


def repeatability_table(records: list[dict]) -> tuple[str, bool]:
    lines = [
        "| op | case | what | per check | disagreement | within limit | unstable in any | fraction of floor | most late |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    all_within = True
    for op in dict.fromkeys(r["op"] for r in records):
        verdicts = [r["verdict"] for r in records if r["op"] == op and r["verdict"] and r["verdict"]["timing"]["measured"]]
        if not verdicts:
            lines.append(f"| {op} | | no measured check | | | NO | | | |")
            all_within = False
            continue
        for k, first in enumerate(verdicts[0]["timing"]["cases"]):
            per_check = [v["timing"]["cases"][k] for v in verdicts]
            unstable = any(c["unstable"] for c in per_check)
            fraction = statistics.median(c["fraction_of_floor"] for c in per_check if c.get("fraction_of_floor"))
            # the largest fraction of late calls (the host behind the clock's spin) of any round, where recorded
            late = max((f for c in per_check for fs in c.get("late_fraction", {}).values() for f in fs), default=None)
            all_within &= not unstable
            for label, key, scale, absolute in QUANTITIES:
                values = [c[key] for c in per_check if c.get(key) is not None]
                if len(values) < len(per_check):
                    continue
                spread, within = _disagreement(values, absolute)
                all_within &= within
                shown = ", ".join(f"{v * scale:.1f}" if scale != 1.0 else f"{v:.3f}" for v in values)
                lines.append(
                    f"| {op} | {first['case']} | {label} | {shown} | {spread:.1%} | {'yes' if within else 'NO'} | "
                    f"{'YES' if unstable else 'no'} | {fraction:.1%} | {'-' if late is None else f'{late:.1%}'} |"
                )
    return "\n".join(lines), all_within


def process_table(records: list[dict]) -> str:
    """Each implementation's median in each of its timing processes (`CaseTiming.process_ms`), check by check: where
    a process-wide offset shows, one process reads apart from the others of its check."""
    lines = ["| op | case | implementation | per check: each process's median (us) |", "| --- | --- | --- | --- |"]
    for op in dict.fromkeys(r["op"] for r in records):
        verdicts = [r["verdict"] for r in records if r["op"] == op and r["verdict"] and r["verdict"]["timing"]["measured"]]
        if not verdicts:
            continue
        for k, first in enumerate(verdicts[0]["timing"]["cases"]):
            for name in first.get("process_ms", {}):
                checks = [v["timing"]["cases"][k].get("process_ms", {}).get(name, []) for v in verdicts]
                shown = " / ".join(", ".join(f"{1e3 * ms:.2f}" for ms in check) for check in checks)
                lines.append(f"| {op} | {first['case']} | {name} | {shown} |")
    return "\n".join(lines)


def clock_table(records: list[dict]) -> str:
    """The SM clock the judge read during each round (`CaseTiming.sm_clock_mhz`: lowest-highest, MHz), per check and
    role, beside the candidate's rounds and the spin each was timed behind (`CaseTiming.spin_ms`): a round read apart
    from the others at another clock, or behind a longer spin after late calls, shows here."""
    lines = [
        "| op | check | case | candidate rounds (us) | its spins (us) | SM clock by round, candidate / reference (MHz) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in records:
        for case in ((r["verdict"] or {}).get("timing") or {}).get("cases", []):
            clocks = case.get("sm_clock_mhz") or {}
            if not clocks:
                continue
            rounds = ", ".join(f"{1e3 * ms:.2f}" for ms in case.get("samples", {}).get("candidate", []))
            told = " / ".join(
                ", ".join(f"{low}-{high}" for low, high in clocks.get(role, [])) for role in ("candidate", "reference")
            )
            spins = ", ".join(f"{1e3 * ms:.0f}" for ms in case.get("spin_ms", {}).get("candidate", []))
            lines.append(f"| {r['op']} | {r['index']} | {case['case']} | {rounds} | {spins} | {told} |")
    return "\n".join(lines) if len(lines) > 2 else "(no SM clock in these verdicts)"


def duration_table(records: list[dict]) -> str:
    lines = [
        "| op | check | gate | exit | passed | seconds | outside the progress clock: before, after (s) | "
        "phases over 1 s | timing processes (s) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in records:
        verdict = r["verdict"] or {}
        phases = ", ".join(f"{p['name']} {p['seconds']:.1f}" for p in verdict.get("phases", []) if p["seconds"] >= 1.0)
        process = verdict.get("timing", {}).get("process_seconds", {})
        outside = r.get("outside_clock")  # absent from logs written before 2026-12-02
        outside_text = f"{outside['before_clock_s']:.1f}, {outside['after_last_line_s']:.1f}" if outside else ""
        lines.append(
            f"| {r['op']} | {r['index']} | {'cold' if r['cold'] else 'warm'} | {r['exit']} | "
            f"{verdict.get('passed')} | {r['seconds']} | {outside_text} | {phases} | "
            f"{', '.join(f'{k} {v:.1f}' for k, v in process.items())} |"
        )
    return "\n".join(lines) + "\n\n" + breakdown_table(records)


def _summed(parts: list[dict[str, float]]) -> str:
    total: dict[str, float] = {}
    for part in parts:
        for name, value in part.items():
            total[name] = total.get(name, 0.0) + value
    return ", ".join(f"{name} {value:.1f}" for name, value in sorted(total.items(), key=lambda kv: -kv[1]) if value >= 0.05)


def breakdown_table(records: list[dict]) -> str:
    """Inside the processes: the candidate's runner summed over its variants (VariantResult.phase_seconds), and
    each timing process summed over its cases (CaseTiming.process_seconds)."""
    lines = [
        "| op | check | runner, summed over variants (s) | timing processes, summed over cases (s) |",
        "| --- | --- | --- | --- |",
    ]
    for r in records:
        verdict = r["verdict"] or {}
        runner = _summed([v["phases"] for v in verdict.get("variant_seconds", [])])
        timing = _summed([c.get("process_seconds", {}) for c in verdict.get("timing", {}).get("cases", [])])
        lines.append(f"| {r['op']} | {r['index']} | {runner} | {timing} |")
    return "\n".join(lines)


def table(args: argparse.Namespace) -> int:
    lines = [json.loads(line) for line in args.log.read_text().splitlines() if line.strip()]
    metas = [line["meta"] for line in lines if "meta" in line]
    records = [line for line in lines if "meta" not in line]
    repeat, within = repeatability_table(records)
    print("\n".join(f"{m['date']} {m['device']} {m['versions']}: {m['command']}" for m in metas))
    print(
        "\n"
        + repeat
        + f"\n\nevery case within the limit and stable: {within}\n\n"
        + process_table(records)
        + "\n\n"
        + clock_table(records)
        + "\n\n"
        + duration_table(records)
    )
    return 0 if within else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks timing", description=__doc__.splitlines()[0])
    verbs = parser.add_subparsers(dest="verb", required=True)
    run_parser = verbs.add_parser("run", help="judge each op's honest candidate repeatedly (GPU)")
    run_parser.add_argument("--ops", nargs="+", default=list(CANDIDATES))
    run_parser.add_argument("--checks", type=int, default=3, help="warm checks per op, after the cold one")
    run_parser.add_argument("--gates-dir", type=Path, default=REPO / "gates")
    run_parser.add_argument("--out", type=Path, required=True)
    run_parser.add_argument("--budget-s", type=float, default=540.0)
    run_parser.add_argument(
        "--cpu", action="store_true", help="rehearsal: each check on the CPU profile (the interpreter; judged, not timed)"
    )
    table_parser = verbs.add_parser("table", help="the tables from a checks.jsonl")
    table_parser.add_argument("log", type=Path)
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)[1:]
    return run(args) if args.verb == "run" else table(args)


if __name__ == "__main__":
    raise SystemExit(main())
