"""What the sandbox's audit hook would refuse an honest candidate on this machine: each op's committed
Triton candidate (benchmarks/honest_candidates.py) run once on its first GPU correctness case, compiled into
an empty Triton cache, then under torch.profiler (as the candidate's timer does), in a fresh process whose
hook records instead of refusing, so that every would-be refusal shows, with where it came from.

    python benchmarks/sandbox_probe.py [--ops ...]

An honest candidate must need nothing refused: anything listed is an allow-list to widen (or a reason to
look at the backend). GPU; not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from honest_candidates import CANDIDATES  # noqa: E402 - beside this script, on sys.path when run as a file

CHILD = """
import json, sys
from pathlib import Path
import torch
from ferret.bench.process import load_function
from ferret.contract.task import Task
from ferret.gate.inputs import draw_inputs, output_specs
from ferret.sandbox import audit

contract_path, candidate, own = sys.argv[1], sys.argv[2], Path(sys.argv[3])
contract = Task.load(Path(contract_path)).contract
device = "cuda" if torch.cuda.is_available() else "cpu"  # the CPU (TRITON_INTERPRET=1) only to try this script
case = next(c for c in contract.cases_for("gpu" if device == "cuda" else "cpu") if c.kind == "correctness")
dtype = contract.primary_dtype
inputs = {k: v.to(device) for k, v in draw_inputs(contract, case, dtype).items()}
outputs = {n: torch.empty(s, dtype=d, device=device) for n, (s, d) in output_specs(contract, case, dtype).items()}

class Recorder(audit.Sandbox):
    def refuse(self, kind, what):  # record, never raise: every would-be refusal shows
        if len(self._seen) < 100:
            self._seen.append((kind, f"{what} (called from {audit._callers()})"))

sandbox = Recorder()
sys.addaudithook(audit.make_hook(audit.default_policy(own), sandbox))
fn = load_function(candidate, contract.candidate_abi.entry, "probe_candidate")
fn(inputs, outputs, dict(contract.params))
if device == "cuda":
    torch.cuda.synchronize()
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn(inputs, outputs, dict(contract.params))
        torch.cuda.synchronize()
    prof.key_averages()
print(json.dumps([[k.value, w] for k, w in sandbox.take()]))
"""


def probe(op: str) -> list:
    own = Path(tempfile.mkdtemp(prefix=f"ferret-probe-{op}-"))
    try:
        shutil.copyfile(REPO / CANDIDATES[op], own / "candidate.py")
        (own / "tmp").mkdir()
        env = {**os.environ, "TMPDIR": str(own / "tmp"), "TRITON_CACHE_DIR": str(own / ".triton"),
               "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
        done = subprocess.run([sys.executable, "-c", CHILD, str(REPO / "contracts" / f"{op}.yaml"), str(own / "candidate.py"),
                               str(own)], cwd=own, env=env, capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            return [["probe_failed", done.stderr[-2000:]]]
        return json.loads(done.stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(own, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", nargs="+", default=list(CANDIDATES))
    args = parser.parse_args(argv)
    clean = True
    for op in args.ops:
        seen = probe(op)
        clean &= not seen
        print(f"{op}: {len(seen)} would be refused" + "".join(f"\n  {kind}: {what}" for kind, what in seen), flush=True)
    return 0 if clean else 1


if __name__ == "__main__":
    raise SystemExit(main())
