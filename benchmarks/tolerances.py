"""Evidence behind the tolerances: N independent checks of every precision variant of an op, judged. CPU.

Checks the honest candidate of MLA (or, with --op, of rmsnorm, softmax or rope: tasks/<op>/precision_variants.py),
its faithful variants and its cuts against the contract's tolerance table:

    python -m benchmarks tolerances --checks 20 --mode math --out DIR
    python -m benchmarks tolerances --checks 2 --mode full --jobs 2 --out DIR

Candidates: the honest Triton candidate, its faithful variants and its cuts
(`tasks/mla_attention/precision_variants.py`). Two modes:
* `full`: each check is a whole `ferret check` in a process of its own (CPU profile, no timing): the
  gate's frozen cases and the fresh private cases the judge draws anew with OS-random seeds. The gate is
  built once, by the first check, before the others start. About a minute a check on 2 shared cores.
* `math`: the judge's numerical decision only, in this process: every frozen CPU case variant (inputs from
  the gate's seeds, golden values from the float64 reference) and, at every check, a new set of fresh cases
  drawn by the judge's own `ferret.gate.fresh.draw_fresh_cases` (OS-random seeds, stratified), each stage
  compared with `ferret.gate.metrics.compare_stage` against the contract's tolerance for that case (the
  long peaked rows have their own row): `tasks.variants.failing_stages`, which the
  tests use too. No sandbox, no
  determinism repeats, no integrity watches: what the tolerances decide, and nothing else. The frozen
  cases give the same answer at every check (same inputs, a deterministic candidate), so they are run
  once per candidate and their result counts in each of its checks.
Writes `results.jsonl` (every check: pass, first failing stage, each failing stage's metric against its
tolerance, seconds) and `table.md` into --out.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import importlib
import json
import os
import platform
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# The op whose variants are checked (--op): its contract and tasks/<op>/precision_variants.py.
OP = "mla_attention"


def _contract() -> Path:
    return ROOT / "contracts" / f"{OP}.yaml"


def _op_variants():
    return importlib.import_module(f"tasks.{OP}.precision_variants")


def _candidates(out: Path, names: list[str]) -> dict[str, tuple[str, Path]]:
    """name -> (kind, candidate file): the honest candidate as it is, every variant written beside the results."""
    folder = out / "candidates"
    folder.mkdir(parents=True, exist_ok=True)
    found: dict[str, tuple[str, Path]] = {}
    for name in names:
        if name == "honest":
            found[name] = ("honest", _op_variants().CANDIDATE_PATH)
        else:
            variants = _op_variants()
            found[name] = (variants.VARIANTS[name].kind, variants.write_variant(name, folder / f"{OP}_{name}.py"))
    return found


def _failures(verdict: dict) -> list[str]:
    """Every failing stage of every variant: `variant stage metric=value > limit` (or the variant's failure)."""
    found = []
    for variant in verdict.get("variants", []):
        if variant.get("passed"):
            continue
        if variant.get("failure"):
            found.append(f"{variant['id']}: {str(variant['failure'])[:120]}")
        for stage in variant.get("stages", []):
            if stage.get("passed", True):
                continue
            tol = stage.get("tolerance") or {}
            numbers = [
                f"{m}={stage.get(m) or 0:.4g}>{tol.get(m)}"
                for m in ("rel_l2", "max_abs_rel_peak")
                if tol.get(m) is not None and (stage.get(m) or 0) > tol[m]
            ]
            if tol.get("cosine_min") is not None and (stage.get("cosine") or 1.0) < tol["cosine_min"]:
                numbers.append(f"cosine={stage.get('cosine'):.6f}<{tol['cosine_min']:.6f}")
            found.append(f"{variant['id']} {stage['stage']} {' '.join(numbers) or '; '.join(stage.get('reasons', []))}")
    return found


def one_check(name: str, path: Path, number: int, gates: Path, out: Path) -> dict:
    verdict_file = out / "verdicts" / f"{name}-{number:02d}.json"
    verdict_file.parent.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable,
        "-m",
        "ferret.cli.main",
        "check",
        str(_contract()),
        str(path),
        "--gates-dir",
        str(gates),
        "--profile",
        "cpu",
        "--no-speed",
        "--verdict-out",
        str(verdict_file),
    ]
    started = time.time()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    seconds = time.time() - started
    record = {"candidate": name, "check": number, "exit": done.returncode, "wall_s": round(seconds, 1)}
    if not verdict_file.exists():
        record.update(passed=None, error=done.stderr[-600:])
        return record
    verdict = json.loads(verdict_file.read_text())
    fresh = [v for v in verdict.get("variants", []) if v.get("part") == "fresh_cases"]
    record.update(
        passed=verdict["passed"],
        first_failing_stage=verdict.get("first_failing_stage"),
        failures=_failures(verdict),
        judge_s=round(verdict.get("seconds") or 0.0, 1),
        fresh_cases=[v["id"] for v in fresh],
        detections=[d["cheat"] for d in verdict.get("detections", [])],
    )
    verdict_file.unlink()  # the table keeps what matters; whole verdicts are large
    return record


def math_checks(candidates: dict[str, tuple[str, Path]], checks: int, record) -> None:
    """`checks` checks of each candidate by the judge's comparison alone (see the module's docstring)."""
    os.environ.setdefault("TRITON_INTERPRET", "1")
    from ferret.contract.task import Task
    from ferret.gate.fresh import draw_fresh_cases
    from tasks.variants import JudgedCase, failing_stages, frozen_cases, import_file

    task = Task.load(_contract())
    contract = task.contract
    frozen = frozen_cases(task, "cpu")
    for name, (_kind, path) in candidates.items():
        module = import_file(path, f"_evidence_{OP}_{name}")
        started = time.time()
        frozen_failures = failing_stages(module.run, contract, frozen)
        frozen_s = time.time() - started
        for number in range(1, checks + 1):
            started = time.time()
            fresh = [JudgedCase(v.id, v.case, v.dtype, v.inputs, v.golden) for v in draw_fresh_cases(task, "cpu", "cpu")]
            found = frozen_failures + failing_stages(module.run, contract, fresh)
            first = next((st.name for st in contract.stages if any(f" {st.name} " in f for f in found)), None)
            record(
                {
                    "candidate": name,
                    "check": number,
                    "passed": not found,
                    "first_failing_stage": first,
                    "failures": found,
                    "wall_s": round(time.time() - started + frozen_s, 1),
                    "fresh_cases": [f"{v.id} {v.case.dims}" for v in fresh],
                }
            )


def _table(records: list[dict], kinds: dict[str, str], checks: int) -> str:
    lines = [
        "| candidate | kind | checks | passed | rejected | no verdict | stages that rejected (count) |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, kind in kinds.items():
        mine = [r for r in records if r["candidate"] == name]
        passed = sum(1 for r in mine if r.get("passed") is True)
        rejected = sum(1 for r in mine if r.get("passed") is False)
        stages: dict[str, int] = {}
        for r in mine:
            if r.get("passed") is False:
                key = str(r.get("first_failing_stage"))
                stages[key] = stages.get(key, 0) + 1
        by_stage = ", ".join(f"{k} ({v})" for k, v in sorted(stages.items())) or "-"
        lines.append(
            f"| {name} | {kind} | {len(mine)} of {checks} | {passed} | {rejected} | "
            f"{len(mine) - passed - rejected} | {by_stage} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks tolerances", description=__doc__.splitlines()[0])
    parser.add_argument("--checks", type=int, default=20)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--gates-dir", type=Path, default=None, help="default: OUT/gates (not committed)")
    parser.add_argument("--candidates", default=None, help="default: honest and every variant of the op")
    parser.add_argument("--op", default="mla_attention", choices=["mla_attention", "rmsnorm", "softmax", "rope"])
    parser.add_argument("--mode", choices=["math", "full"], default="math")
    args = parser.parse_args(argv)
    global OP
    OP = args.op
    args.candidates = args.candidates or ",".join(["honest", *_op_variants().VARIANTS])
    out = args.out.resolve()
    gates = (args.gates_dir or out / "gates").resolve()
    gates.mkdir(parents=True, exist_ok=True)
    candidates = _candidates(out, args.candidates.split(","))
    started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    results = out / "results.jsonl"
    records: list[dict] = []

    def record(r: dict) -> None:
        records.append(r)
        with results.open("a") as f:
            f.write(json.dumps(r) + "\n")
        print(
            f"{r['candidate']:18s} #{r['check']:02d} passed={r.get('passed')} {r.get('first_failing_stage')} "
            f"{r['wall_s']}s {(r.get('failures') or [''])[0][:110]}",
            flush=True,
        )

    if args.mode == "math":
        math_checks(candidates, args.checks, record)
    else:
        first = next(iter(candidates))
        record(one_check(first, candidates[first][1], 1, gates, out))  # builds the gate alone
        jobs = [(n, p, i) for i in range(1, args.checks + 1) for n, (_, p) in candidates.items() if (n, i) != (first, 1)]
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            for r in pool.map(lambda job: one_check(job[0], job[1], job[2], gates, out), jobs):
                record(r)
    kinds = {n: k for n, (k, _) in candidates.items()}
    summary = (
        f"Started {started}, finished {_dt.datetime.now(_dt.timezone.utc).isoformat(timespec='seconds')}; "
        f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
        f"command: python -m benchmarks tolerances --op {OP} --checks {args.checks} --mode {args.mode} "
        f"--jobs {args.jobs} --candidates {args.candidates} --out <out>\n\n"
    )
    (out / "table.md").write_text(summary + _table(records, kinds, args.checks))
    print(summary + _table(records, kinds, args.checks))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
