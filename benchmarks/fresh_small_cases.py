"""How close the honest MLA candidate comes to the tolerance on the judge's small fresh cases (issue 12 §3).

    TRITON_INTERPRET=1 python benchmarks/fresh_small_cases.py DRAWS [--every-case] > out.jsonl

DRAWS times, the judge's own fresh plan (`ferret.gate.fresh.draw_fresh_cases`, OS-random seeds, CPU profile);
every drawn case with B*H*L <= 64 is run through the honest Triton candidate and its scores, probs, o_latent
and o_heads compared with the contract's tolerance (`ferret.gate.metrics.compare_stage`). Prints one JSON line
per failing stage, and per scores stage above half its max_abs_rel_peak limit; then the number of small cases
and the seconds. With `--every-case`, every drawn case and every stage (how a one-row cache's kv_cache was found
below bf16's rounding, 1 of 903 cases, 2026-12-01). A benchmark, not a test: the draws are random.
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
from ferret.gate.metrics import compare_stage, error_scale_of  # noqa: E402
from tasks.variants import import_file  # noqa: E402

STAGES = ("scores", "probs", "o_latent", "o_heads")


def main(draws: int, every_case: bool = False) -> None:
    task = Task.load(REPO / "contracts" / "mla_attention.yaml")
    contract = task.contract
    candidate = import_file(REPO / "tasks/mla_attention/candidates/triton_mla.py", "_fresh_small_candidate")
    stages = {s.name: s for s in contract.stages}
    started, small = time.time(), 0
    for draw in range(draws):
        for variant in draw_fresh_cases(task, "cpu", "cpu"):
            dims = variant.case.dims
            if dims["B"] * dims["H"] * dims["L"] > 64 and not every_case:
                continue
            small += 1
            got = _run_implementation(candidate.run, variant.inputs, contract, variant.case, variant.dtype, "cpu")
            for name in (stages if every_case else STAGES):
                tol = contract.tolerance(variant.dtype, name, None)
                m = compare_stage(got.get(name), variant.golden[name].cpu(), stages[name], tol,
                                  error_scale=error_scale_of(variant.golden, stages[name]))
                near = name == "scores" and (m.max_abs_rel_peak or 0) > 0.5 * (tol.max_abs_rel_peak or 0)
                if not m.passed or near:
                    print(json.dumps({"draw": draw, "id": variant.id, "seed": variant.seed, "dims": dims,
                                      "strata": list(variant.strata),
                                      "edits": [e.model_dump() for e in variant.case.edits], "stage": name,
                                      "passed": m.passed, "max_abs_rel_peak": m.max_abs_rel_peak, "rel_l2": m.rel_l2,
                                      "reference": variant.golden[name].flatten()[:16].tolist(),
                                      "candidate": got[name].flatten()[:16].tolist()}), flush=True)
    print(json.dumps({"small_cases": small, "draws": draws, "seconds": round(time.time() - started, 1)}), flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]), "--every-case" in sys.argv[2:])
