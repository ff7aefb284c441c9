"""Speed of the honest Triton candidates against their baselines, measured by the gate itself.

Each op's candidate goes through `ferret check --profile gpu`: correctness, dtypes, edge cases,
determinism and stress first, then timing in its own process (do_bench medians, L2 flushed before every
call, candidate and baseline interleaved over rounds, median over rounds; torch.compile of the baseline
beside it). Writes one long-format JSON file and a markdown table under benchmarks/results/.

    python benchmarks/gate_speed.py [--ops rmsnorm softmax rope mla_attention] [--out benchmarks/results]
    python benchmarks/gate_speed.py --from-reports   # collect the latest GPU verdicts already in gates/*/report.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from honest_candidates import CANDIDATES  # noqa: E402 - beside this script, on sys.path when run as a file


def _latest_timed_verdict(gates_dir: Path, op: str):
    """The latest timed GPU verdict on a gate built from contracts/<op>.yaml itself (other contracts of the
    same op, such as the GPU tests' small rmsnorm contract, share the gates folder)."""
    from ferret.contract.load import load_contract
    from ferret.gate.report import read_verdicts

    wanted = load_contract(REPO / f"contracts/{op}.yaml").model_dump(mode="json")
    best = None
    for report_file in gates_dir.glob("*/report.json"):
        manifest = json.loads((report_file.parent / "manifest.json").read_text())
        if manifest.get("contract") != wanted:
            continue
        for verdict in read_verdicts(report_file.parent):
            is_timed = verdict.op == op and verdict.profile == "gpu" and verdict.timing.measured
            if is_timed and (best is None or verdict.started_at > best[0].started_at):
                best = (verdict, report_file.parent)
    return best


def _us(ms: float | None) -> str:
    return "n/a" if ms is None else f"{ms * 1e3:.1f}"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ops", nargs="*", default=list(CANDIDATES))
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    parser.add_argument("--gates-dir", type=Path, default=REPO / "gates")
    parser.add_argument("--from-reports", action="store_true", help="Do not judge again: read the verdicts in the gates' reports.")
    args = parser.parse_args()

    import torch

    from ferret.gate.judge import check
    from ferret.gate.platform_info import device_name, versions

    if not torch.cuda.is_available():
        print("gate_speed: needs a CUDA GPU", file=sys.stderr)
        return 2
    rows, verdicts, timed = [], {}, []
    for op in args.ops:
        print(f"== {op}", file=sys.stderr, flush=True)
        if args.from_reports:
            found = _latest_timed_verdict(args.gates_dir, op)
            if found is None:
                print(f"   no timed GPU verdict for {op} in {args.gates_dir}", file=sys.stderr)
                continue
            verdict, gate = found
        else:
            verdict, gate = check(
                REPO / f"contracts/{op}.yaml", REPO / CANDIDATES[op], args.gates_dir, profile="gpu",
                progress=lambda m: print(f"   {m}", file=sys.stderr, flush=True),
            )
        timed.append(verdict)
        verdicts[op] = {"passed": verdict.passed, "started_at": verdict.started_at, "candidate_sha256": verdict.candidate_sha256, "parts": {k: v.model_dump() for k, v in verdict.parts.items()},
                        "gate": gate.name, "timing_reason": verdict.timing.reason,
                        "false_rejections": [r.id for r in verdict.variants if not r.passed]}
        for case in verdict.timing.cases:
            rows.append({"op": op, "case": case.case, "candidate_ms": case.candidate_ms, "baseline_ms": case.baseline_ms,
                         "baseline_compiled_ms": case.baseline_compiled_ms, "speedup": case.speedup,
                         "speedup_vs_compiled": case.speedup_vs_compiled, "target": verdict.timing.min_speedup_required,
                         "wall_ms": case.wall_ms, "floor_ms": case.floor_ms, "pool_sets": case.pool_sets,
                         "flags": case.flags, "samples": case.samples})
    now = dt.datetime.now(dt.timezone.utc)
    record = {
        "date": now.isoformat(timespec="seconds"),
        "device": device_name(),
        "versions": versions(),
        "command": "python -m pytest -m gpu tests/gpu (the judge times every correct GPU candidate), then "
        "python benchmarks/gate_speed.py " + " ".join(sys.argv[1:]),
        "method": "ferret check --profile gpu, whose timing is: " + next(
            (v.timing.method for v in timed if v.timing.method), "(no timed verdict)"),
        "verdicts": verdicts,
        "rows": rows,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    stem = f"{now.date().isoformat()}-gate-speed-{device_name().replace(' ', '_')}"
    (args.out / f"{stem}.json").write_text(json.dumps(record, indent=1))
    lines = [
        f"# Gate speed, {record['date']}, {record['device']}",
        "",
        f"Command: `{record['command']}`. Versions: " + ", ".join(f"{k} {v}" for k, v in record["versions"].items()) + ".",
        f"Method: {record['method']}.",
        "",
        (
            "| op | case | candidate (us) | baseline eager (us) | torch.compile (us) | speedup vs eager | vs compile | "
            "synchronized wall (us/call) | floor (us) | input sets | timing flags | gate verdict |"
        ),
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        comp = f"{r['baseline_compiled_ms'] * 1e3:.1f}" if r["baseline_compiled_ms"] else "n/a"
        vs = f"{r['speedup_vs_compiled']:.2f}x" if r["speedup_vs_compiled"] else "n/a"
        lines.append(f"| {r['op']} | {r['case']} | {r['candidate_ms'] * 1e3:.1f} | {r['baseline_ms'] * 1e3:.1f} | {comp} | "
                     f"{r['speedup']:.2f}x | {vs} | {_us(r['wall_ms'])} | {_us(r['floor_ms'])} | {r['pool_sets']} | "
                     f"{'; '.join(r['flags']) or 'none'} | {'pass' if verdicts[r['op']]['passed'] else 'FAIL'} |")
    for op, v in verdicts.items():
        if not v["passed"]:
            lines.append(f"\n{op}: gate FAILED: {v['parts']} {v['false_rejections']}")
    (args.out / f"{stem}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if all(v["passed"] for v in verdicts.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
