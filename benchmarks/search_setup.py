"""The template search's set-up cost: making it over a space and its first proposals (seconds, peak memory). CPU.

    python -m benchmarks search-setup --out FILE.jsonl [--repos DIR ...] [--templates tasks/mla_attention/templates]

What the offline optimizer's search costs before any candidate is judged.

Each repo (a checkout of this project; default: this one) is measured in its own fresh process, one after the other,
so two versions of the search are compared side by side in one run: `git worktree add /tmp/before <rev>` gives the
earlier one. The child makes `TemplateSearchOptimizer(templates)`, lists the space (what a dispatch does before round 1,
so that two points named alike stop it), then proposes twice for round 2 after the default passed with a time (the
first proposal builds the ranking's arrays). The parent reads the child's own peak memory (`os.wait4`). Each row: the
repo, its commit, the phases' seconds, the whole wall time, the peak resident memory, the space's size.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# Run in the child, with the measured repo first on sys.path: prints one JSON line of the phases' seconds.
CHILD = """
import json, sys, time
started = time.perf_counter()
from ferret.roles.base import OptimizerContext, RoundFeedback
from ferret.roles.offline import TemplateSearchOptimizer
imported = time.perf_counter()
optimizer = TemplateSearchOptimizer(sys.argv[1])
size = len(optimizer.by_approach)
listed = time.perf_counter()
space = optimizer.space
default = space.approach(space.default_point())
context = OptimizerContext(op=space.op, contract_yaml="", baseline_source="", abi="", round=2, tried_approaches=[default],
                           history=[RoundFeedback(round=1, approach=default, passed=True, timing={"speedup": 1.5})],
                           languages=["triton", "cuda"])
first = [p.approach for p in optimizer.propose(context)]
proposed = time.perf_counter()
second = [p.approach for p in optimizer.propose(context)]
again = time.perf_counter()
print(json.dumps({"points": size, "import_s": imported - started, "list_s": listed - imported,
                  "first_propose_s": proposed - listed, "second_propose_s": again - proposed, "proposals": first,
                  "same_again": first == second}))
"""


def measure(repo: Path, templates: str) -> dict:
    """One fresh process over `repo`'s code: its phases, wall time and peak resident memory."""
    env = {**os.environ, "PYTHONPATH": str(repo)}
    started = time.perf_counter()
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(repo / templates)], cwd=repo, env=env, stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    output = child.stdout.read()
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{repo}: the search failed (exit {os.waitstatus_to_exitcode(status)})")
    commit = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return {
        "repo": str(repo),
        "commit": commit.stdout.strip(),
        **json.loads(output),
        "wall_s": round(wall, 2),
        "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
    }


def machine() -> dict:
    import numpy

    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "numpy": numpy.__version__,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks search-setup", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--repos", type=Path, nargs="+", default=[REPO])
    parser.add_argument("--templates", default="tasks/mla_attention/templates")
    args = parser.parse_args(argv)
    context = machine()
    with args.out.open("a") as out:
        for repo in args.repos:
            row = {**context, "templates": args.templates, **measure(repo.resolve(), args.templates)}
            out.write(json.dumps(row) + "\n")
            print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
