"""Does a long peaked CPU case tell the committed MLA kernel's precision cuts from the kernel itself?

The precision variants (`tasks/mla_attention/precision_variants.py`) are written as edits of a kernel's lines. Here
they are applied to the committed candidate (`candidates/triton_mla.py`, 64-token tiles since 2026-12-01) where
their lines occur in it, and the honest kernel and each variant are run under Triton's interpreter on the
contract's `long_rows_peaked` and on copies of it with more tokens (`--lengths`: cases added in memory only, the
contract unchanged). Prints o_latent's and o_heads' rel_l2 against the float64 reference, and the limit the judge
would apply (the case's own row where the tolerance file has one, else the general row). Not a gate:

    python benchmarks/mla_long_case_cuts.py --lengths 1536 > benchmarks/results/<date>-cpu-mla-long-case-cuts/out.txt
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

STAGES = ("o_latent", "o_heads")


def _contract_with_longer_cases(task, lengths: list[int]):
    """The task's contract with a copy of `long_rows_peaked` at each length added to its CPU cases."""
    contract = task.contract
    long_case = next(c for c in contract.cases_for("cpu") if c.name == "long_rows_peaked")
    extra = [long_case.model_copy(update={"name": f"long_rows_peaked_l{n}", "dims": {**long_case.dims, "L": n}})
             for n in lengths]
    cases = contract.cases.model_copy(update={"cpu": [*contract.cases.cpu, *extra]})
    return contract.model_copy(update={"cases": cases})


def _implementations(folder: Path) -> dict:
    """The committed kernel, and each precision variant whose edited lines occur in it."""
    from tasks.mla_attention.candidates import triton_mla
    from tasks.mla_attention.precision_variants import VARIANTS
    from tasks.mla_attention.simplifications import CANDIDATE_PATH
    from tasks.variants import VariantFiles

    files = VariantFiles(lambda name: list(VARIANTS[name].edits), "_mla_long_case", CANDIDATE_PATH)
    found = {"honest": triton_mla.run}
    for name in VARIANTS:
        try:
            found[name] = files.load(name, folder).run
        except ValueError as err:  # an edited line that the committed kernel does not have
            print(f"{name}: not applicable to triton_mla.py ({str(err)[:120]})", flush=True)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="*", default=[1536], help="extra lengths of the long case")
    args = parser.parse_args(argv)

    import torch
    import triton

    from ferret.contract.task import Task
    from ferret.gate.calibrate import _run_implementation
    from ferret.gate.metrics import compare_stage
    from tasks.variants import frozen_cases

    loaded = Task.load(REPO / "contracts" / "mla_attention.yaml")
    task = dataclasses.replace(loaded, contract=_contract_with_longer_cases(loaded, args.lengths))
    cases = [c for c in frozen_cases(task, "cpu") if c.case.name.startswith("long_rows_peaked")]
    print(f"torch {torch.__version__}, triton {triton.__version__} (interpreter); cases {[c.id for c in cases]}",
          flush=True)
    stages = {s.name: s for s in task.contract.stages}
    for name, run in _implementations(Path(tempfile.mkdtemp(prefix="mla-long-case-"))).items():
        for judged in cases:
            started = time.perf_counter()
            got = _run_implementation(run, judged.inputs, task.contract, judged.case, judged.dtype, "cpu")
            shown = []
            for stage in STAGES:
                tol = task.contract.tolerance(judged.dtype, stage, judged.case.name)
                metrics = compare_stage(got.get(stage), judged.golden[stage].cpu(), stages[stage], tol)
                shown.append(f"{stage} {metrics.rel_l2 or 0:.4g} (limit {tol.rel_l2}, {'pass' if metrics.passed else 'FAIL'})")
            print(f"{name:18} {judged.case.name:24} " + "; ".join(shown) + f"  [{time.perf_counter() - started:.1f} s]",
                  flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
