"""The honest paged MLA candidate on the judge's fresh cases of contracts/mla_attention_paged.yaml (CPU profile).

    TRITON_INTERPRET=1 python benchmarks/paged_fresh_sweep.py DRAWS SECONDS

DRAWS times the judge's own fresh plan (OS-random seeds; no new draw after SECONDS), every stage of every case
compared with the contract's tolerance: one JSON line per failing stage (with the case's seed, to draw it again with
`draw_inputs(contract, case, dtype, seed)`), then the number of cases and each
stage's largest rel_l2 / limit. A benchmark, not a test: the draws are random.
"""
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ferret.contract.task import Task  # noqa: E402
from ferret.gate.calibrate import _run_implementation  # noqa: E402
from ferret.gate.fresh import draw_fresh_cases  # noqa: E402
from ferret.gate.metrics import compare_stage  # noqa: E402
from tasks.variants import import_file  # noqa: E402


def main(draws: int, seconds: float) -> None:
    task = Task.load(REPO / "contracts" / "mla_attention_paged.yaml")
    contract = task.contract
    candidate = import_file(REPO / "tasks/mla_attention_paged/candidates/triton_mla_paged.py", "_paged_sweep")
    started, cases, worst = time.time(), 0, {}
    for draw in range(draws):
        for variant in draw_fresh_cases(task, "cpu", "cpu"):
            cases += 1
            got = _run_implementation(candidate.run, variant.inputs, contract, variant.case, variant.dtype, "cpu")
            for stage in contract.stages:
                tol = contract.tolerance(variant.dtype, stage.name, None)
                m = compare_stage(got.get(stage.name), variant.golden[stage.name].cpu(), stage, tol)
                worst[stage.name] = max(worst.get(stage.name, 0.0), (m.rel_l2 or 0.0) / (tol.rel_l2 or 1.0))
                if not m.passed:
                    print(json.dumps({"draw": draw, "id": variant.id, "seed": variant.seed, "dims": variant.case.dims,
                                      "stage": stage.name,
                                      "reasons": m.reasons, "rel_l2": m.rel_l2}), flush=True)
        if time.time() - started > seconds:
            break
    print(json.dumps({"cases": cases, "draws": draw + 1, "seconds": round(time.time() - started),
                      "worst_rel_l2_over_limit": {k: round(v, 3) for k, v in worst.items()}}), flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]), float(sys.argv[2]))
