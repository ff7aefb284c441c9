"""A mutant's class, from its error against the float64 reference on the audit's own independent cases.

The independent set is drawn with the audit's seeds, never the gate's: rounds of the fresh-case plan
(`ferret.gate.fresh.plan_fresh_cases`, so every stratum of the profile is held in every round), each round in the
next of the contract's dtypes (by default one round per dtype), and the profile's own case shapes and edits at new
seeds. Errors are measured the gate's way (`compare_to_golden` with the contract's tolerance table,
`ferret/audit/worker.py`).

- harmful: over the tolerance on some case, or raising on some case where others ran (a worker that died or ran out
  of time on a case: that case's raise, after the cases it finished, `ferret.audit.run.case_errors`);
- benign: on every case within the honest candidates' spread (per dtype and stage, the worst the honest
  candidates showed on the same set);
- band: worse than honest, inside the tolerance: reported apart and unscored, since a gate that rejected them would
  need tolerances tighter than honest kernels need;
- stillborn: raising on every case (it tests only that a candidate runs): unscored.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import torch
from safetensors.torch import save_file

from ferret.audit.models import CaseError, Classification
from ferret.audit.worker import GOLDEN_PREFIX, INPUT_PREFIX
from ferret.contract.model import Case, ProfileName
from ferret.contract.shapes import evaluate_shape
from ferret.contract.task import Task
from ferret.gate.fresh import plan_fresh_cases
from ferret.gate.inputs import draw_inputs

Spread = dict[tuple[str, str, str], float]  # (dtype, stage, metric) -> the worst an honest candidate showed
_METRICS = ("rel_l2", "max_abs_rel_peak", "max_row_rel")


def plan_independent(
    task: Task, profile: ProfileName, seed: int, rounds: int | None = None
) -> list[tuple[Case, str, tuple[str, ...]]]:
    """(case, dtype, strata) of the audit's independent set; every seed drawn from the audit's own `seed`, and none
    equal to a gate case's seed. `rounds` defaults to one per dtype, so that every stratum is held in every dtype: a
    mutant that narrows a float32 accumulator only on long rows is harmful only on a long float32 row."""
    contract = task.contract
    rounds = rounds or len(contract.dtypes)
    rng = random.Random(seed)
    gate_seeds = {c.seed for c in contract.cases_for(profile)}

    def new_seed() -> int:
        drawn = rng.getrandbits(62)
        return drawn if drawn not in gate_seeds else new_seed()

    planned: list[tuple[Case, str, tuple[str, ...]]] = []
    for number in range(rounds):
        dtype = contract.dtypes[number % len(contract.dtypes)]
        for case, strata in plan_fresh_cases(contract, profile, rng):
            planned.append(
                (case.model_copy(update={"name": f"round{number + 1}_{case.name}", "seed": new_seed()}), dtype, strata)
            )
    for case in contract.cases_for(profile):
        for dtype in contract.dtypes if case.kind != "edge" else [contract.primary_dtype]:
            planned.append((case.model_copy(update={"name": f"shape_{case.name}", "seed": new_seed()}), dtype, ()))
    return planned


def write_cases(task: Task, planned: list[tuple[Case, str, tuple[str, ...]]], folder: Path, device: str) -> int:
    """Each case's inputs and golden stages (the reference in float64, kept as the contract's golden dtype) in one
    safetensors file, and their index (`cases.json`); returns how many were written."""
    contract = task.contract
    golden_dtype = torch.float32 if contract.reference.golden_dtype == "float32" else torch.float64
    folder.mkdir(parents=True, exist_ok=True)
    index = []
    for number, (case, dtype, strata) in enumerate(planned):
        inputs = draw_inputs(contract, case, dtype)
        with torch.no_grad():
            stages = task.reference({k: v.to(device) for k, v in inputs.items()}, dict(contract.params))
        tensors = {INPUT_PREFIX + k: v.contiguous() for k, v in inputs.items()}
        tensors |= {GOLDEN_PREFIX + n: stages[n].detach().to("cpu", golden_dtype).contiguous() for n in contract.golden_names()}
        name = f"case{number:03d}.safetensors"
        save_file(tensors, str(folder / name))
        index.append({"file": name, "case": case.name, "dtype": dtype, "dims": dict(case.dims), "strata": list(strata)})
    (folder / "cases.json").write_text(json.dumps(index, indent=1))
    return len(index)


def size_threshold(planned: list[tuple[Case, str, tuple[str, ...]]], task: Task) -> int:
    """The median, over the independent cases, of the largest input's element count: the `above_size` condition
    then splits the set about in half."""
    sizes = []
    for case, _, _ in planned:
        largest = 0
        for spec in task.contract.inputs:
            count = 1
            for n in evaluate_shape(list(spec.shape), case.dims):
                count *= n
            largest = max(largest, count)
        sizes.append(largest)
    sizes.sort()
    return sizes[len(sizes) // 2] if sizes else 0


def honest_spread(honest: list[list[CaseError]]) -> Spread:
    """Per (dtype, stage, metric), the worst any honest candidate showed over the independent set."""
    spread: Spread = {}
    for errors in honest:
        for error in errors:
            for stage in error.stages:
                for metric in _METRICS:
                    value = getattr(stage, metric)
                    if value is not None:
                        key = (error.dtype, stage.stage, metric)
                        spread[key] = max(spread.get(key, 0.0), value)
    return spread


def _excess(error: CaseError, spread: Spread) -> tuple[float, str]:
    """How far past the honest spread the case's worst metric is (a ratio; 0 when within it), and which it is."""
    worst, what = 0.0, ""
    for stage in error.stages:
        for metric in _METRICS:
            value = getattr(stage, metric)
            if value is None:
                continue
            honest = spread.get((error.dtype, stage.stage, metric), 0.0)
            if value > honest:
                ratio = value / honest if honest > 0 else float("inf")
                if ratio > worst:
                    worst, what = ratio, f"{stage.stage} {metric} {value:.3e} against the honest {honest:.3e}"
    return worst, what


def classify(errors: list[CaseError], spread: Spread) -> Classification:
    """A mutant's class from its errors on the independent cases (`errors` may stop at the first harmful case)."""
    if not errors:
        return Classification(kind="stillborn", detail="no independent case ran")
    ran = [e for e in errors if e.raised is None]
    if not ran:
        return Classification(kind="stillborn", detail=f"raised on every case: {errors[0].raised}", worst=errors[0])
    harmful = next((e for e in errors if not e.within_tolerance), None)
    if harmful is not None:
        why = harmful.raised or "; ".join(f"{s.stage}: {', '.join(s.reasons)}" for s in harmful.stages if not s.passed)
        return Classification(kind="harmful", detail=f"{harmful.case} ({harmful.dtype}, {harmful.dims}): {why}", worst=harmful)
    excess = [(_excess(e, spread), e) for e in errors]
    (ratio, what), worst = max(excess, key=lambda item: item[0][0])
    if ratio > 0:
        return Classification(kind="band", detail=f"inside the tolerance, worse than honest: {worst.case}: {what}", worst=worst)
    return Classification(kind="benign", detail="within the honest candidates' spread on every independent case")
