"""The FP8 contract's tolerance table, by calibrate's method, then the bf16 contract's rules for what the math fixes.

    python -m tasks.mla_attention_fp8.derive_tolerances [--seeds 8] [--margin 3] [--check-seeds 4]

1. `ferret calibrate` (ferret/gate/calibrate.py) over the honest implementations, the eager baseline and the Triton
   candidate (both faithful: accumulators, softmax statistics in float32, bf16 only for product operands, P and
   stored stages): each stage's largest error against the float64 reference over `--seeds` seeds of every CPU case
   variant, x `--margin` (3, as the bf16 contract's table: 1.5 rejected faithful kernels on small fresh cases),
   floored at 8 float32 rounding units; then the false-rejection rate on fresh seeds.
2. What the math fixes, not the seeds (`finish`):
   - kv_latent is judged exactly (its allowance, `Stage.exact_within`: one e4m3 unit at rounding ties only). Its
     statistical bounds are the most the allowance admits, so that they never reject what it allows: an e4m3 unit
     is at most 2^-3 of the value, so 2^-3 relative (L2, peak, each row), and the cosine that implies. kv_scale
     likewise (a bf16 unit at a tie, at most 2^-7 of the scale; its rows of 4 scales are never judged as rows).
   - kv_rope is a stage stored in bf16 whose appended row may be the whole stage (a one-row cache): rel_l2 at least
     2^-8 (bf16's unit roundoff), as the bf16 contract's kv_cache (contracts/mla_attention.tolerances.yaml says why).
   - scores keep the bf16 contract's scale_floor and peak_floor (the same inputs' natural scale; one-token fresh cases).
   - a stage whose rows the CPU cases never judge (too short) takes the bf16 contract's row bound for it, else none.
3. The frozen case first_token gets a row of its own (`case_rows`, CASE_ROWS: why there).
"""
from __future__ import annotations

import argparse
import math
from pathlib import Path

import yaml

from ferret.gate.calibrate import calibrate

ROOT = Path(__file__).resolve().parents[2]
CONTRACT = ROOT / "contracts" / "mla_attention_fp8.yaml"
TABLE = ROOT / "contracts" / "mla_attention_fp8.tolerances.yaml"
BF16_TABLE = ROOT / "contracts" / "mla_attention.tolerances.yaml"
CANDIDATE = ROOT / "tasks" / "mla_attention_fp8" / "candidates" / "triton_mla_fp8.py"
E4M3_UNIT = 2.0**-3  # one e4m3 unit relative to the value it is next to, at most (3 mantissa bits)
BF16_ROUNDOFF = 2.0**-8
BF16_UNIT = 2.0**-7  # one bf16 unit relative to the value it is next to, at most (7 mantissa bits)
# Frozen cases that get a row of their own (the table's by_case, as the bf16 contract's long rows): first_token's
# cache holds the appended token alone, so its attention output is that token's dequantized row, and the honest
# error there (its bf16 rounding, 0.0015 o_latent) is a fifteenth of the table's (short peaked rows); attending over
# the token unquantized (a bf16 shadow cache) adds its quantization error, 0.025, which hides under the table alone.
CASE_ROWS = ("first_token",)
CASE_STAGES = ("o_latent", "o_heads")
CASE_MARGIN = 1.4
FLOOR = 8 * 2.0**-24
CASE_NOTE = (
    ". by_case.first_token: o_latent and o_heads rel_l2 and cosine_min from the honest implementations' largest error on "
    "that frozen case x 1.4, never looser than by_dtype (tasks/mla_attention_fp8/derive_tolerances.py case_rows)"
)
NOTE = (
    "; then (tasks/mla_attention_fp8/derive_tolerances.py finish): kv_latent's bounds the most its allowance admits "
    "(one e4m3 unit, 2^-3 of a value: rel_l2, max_abs_rel_peak and max_row_rel 0.125, the cosine it implies), "
    "kv_scale's likewise (a bf16 unit at a tie: 2^-7), kv_rope's "
    "rel_l2 at least bf16's unit roundoff 2^-8 (a one-row cache's appended row rounded once), scores' scale_floor and "
    "peak_floor the bf16 contract's, and a stage whose rows no CPU case judged (under 64 entries) the bf16 contract's row "
    "bound for it, else none"
)


def _bounds_for_rounding(relative: float) -> dict[str, float]:
    return {
        "rel_l2": relative,
        "max_abs_rel_peak": relative,
        "cosine_min": math.sqrt(1.0 - relative * relative),
        "max_row_rel": relative,
    }


def _unjudged_rows(row: dict, bf16_row: dict) -> None:
    """A stage none of whose rows the calibration judged (rows under ferret/gate/metrics.py's ROW_MIN_ENTRIES: the
    CPU cases' short caches) has no measured row bound, only the floor: the bf16 contract's row bound for the same
    stage (derived on long rows of the same math), else none (its rows, such as kv_scale's 4 scales, are never judged)."""
    if "max_row_rel" in bf16_row:
        row["max_row_rel"] = bf16_row["max_row_rel"]
    else:
        row.pop("max_row_rel", None)


def finish(table: dict, bf16_table: dict) -> dict:
    """calibrate's table with the rules the math fixes (the module's docstring)."""
    for dtype, stages in table["by_dtype"].items():
        for stage, row in stages.items():
            if table["observed"][dtype][stage].get("max_row_rel", 1.0) == 0.0:
                _unjudged_rows(row, bf16_table["by_dtype"][dtype].get(stage, {}))
        stages["kv_latent"] = _bounds_for_rounding(E4M3_UNIT)
        stages["kv_scale"] = {k: v for k, v in _bounds_for_rounding(BF16_UNIT).items() if k != "max_row_rel"}
        rope = stages["kv_rope"]
        if rope["rel_l2"] < BF16_ROUNDOFF:
            rope["rel_l2"] = BF16_ROUNDOFF
            rope["cosine_min"] = min(rope["cosine_min"], 1.0 - BF16_ROUNDOFF**2 / 2)
        bf16_scores = bf16_table["by_dtype"][dtype]["scores"]
        stages["scores"].update({k: bf16_scores[k] for k in ("scale_floor", "peak_floor")})
    table["provenance"] += NOTE
    return table


def case_errors(case_name: str, contract_path: Path = CONTRACT, candidate_path: Path = CANDIDATE) -> dict[str, dict[str, float]]:
    """stage -> metric -> the largest error of any honest implementation on the frozen case `case_name` (the gate's
    own inputs: the case's seed)."""
    import importlib.util
    import os

    os.environ.setdefault("TRITON_INTERPRET", "1")
    from ferret.contract.load import load_contract
    from ferret.gate.calibrate import _run_implementation
    from ferret.gate.inputs import draw_inputs
    from ferret.gate.metrics import compare_stage
    from ferret.contract.imports import load_entry

    spec = importlib.util.spec_from_file_location(candidate_path.stem, candidate_path)
    assert spec is not None and spec.loader is not None
    candidate = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(candidate)
    contract = load_contract(contract_path)
    baseline, reference = (load_entry(e, ROOT) for e in (contract.baseline.entry, contract.reference.entry))
    case = next(c for c in contract.cases.cpu if c.name == case_name)
    inputs = draw_inputs(contract, case, contract.primary_dtype)
    golden = reference(inputs, dict(contract.params))
    worst: dict[str, dict[str, float]] = {s: {"rel_l2": 0.0, "one_minus_cosine": 0.0} for s in CASE_STAGES}
    for run in (baseline, candidate.run):
        got = _run_implementation(run, inputs, contract, case, contract.primary_dtype, "cpu")
        for stage in (s for s in contract.stages if s.name in CASE_STAGES):
            m = compare_stage(got[stage.name], golden[stage.name].float(), stage, contract.tolerance("bfloat16", stage.name))
            errors = {"rel_l2": m.rel_l2 or 0.0, "one_minus_cosine": 1.0 - (m.cosine if m.cosine is not None else 1.0)}
            worst[stage.name] = {k: max(v, errors[k]) for k, v in worst[stage.name].items()}
    return worst


def case_rows(table: dict, contract_path: Path = CONTRACT, candidate_path: Path = CANDIDATE) -> dict:
    """The table with a row of its own for each of CASE_ROWS: CASE_STAGES' rel_l2 and cosine_min from the honest
    implementations' largest error on that frozen case x CASE_MARGIN, never looser than by_dtype."""
    by_case = {}
    for case in CASE_ROWS:
        rows = {}
        for dtype, stages in table["by_dtype"].items():
            rows[dtype] = {}
            for stage, worst in case_errors(case, contract_path, candidate_path).items():
                general = stages[stage]
                rel_l2 = min(float(f"{max(worst['rel_l2'] * CASE_MARGIN, FLOOR):.3g}"), general["rel_l2"])
                distance = max(worst["one_minus_cosine"] * CASE_MARGIN, FLOOR * FLOOR)
                cosine = max(min(1.0 - distance, math.sqrt(1.0 - rel_l2 * rel_l2)), general["cosine_min"])
                rows[dtype][stage] = {**general, "rel_l2": rel_l2, "cosine_min": cosine}
        by_case[case] = rows
    table["by_case"] = by_case
    table["provenance"] += CASE_NOTE
    return table


def main(contract_path: Path = CONTRACT, candidate_path: Path = CANDIDATE, doc: str | None = None) -> None:
    parser = argparse.ArgumentParser(description=doc or __doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--margin", type=float, default=3.0)
    parser.add_argument("--check-seeds", type=int, default=4)
    parser.add_argument("--force", action="store_true", help="write a table looser than the one in force")
    args = parser.parse_args()
    out = calibrate(contract_path, seeds=args.seeds, margin=args.margin, check_seeds=args.check_seeds,
                    candidates=[candidate_path], progress=print, force=args.force)
    text = out.read_text()
    header = "".join(line for line in text.splitlines(keepends=True) if line.startswith("#") and "Do not edit" not in line)
    module = "tasks.mla_attention_fp8_paged" if contract_path != CONTRACT else "tasks.mla_attention_fp8"
    header += f"# Then `python -m {module}.derive_tolerances`'s rules (its docstring). Do not edit by hand.\n"
    table = finish(yaml.safe_load(text), yaml.safe_load(BF16_TABLE.read_text()))
    out.write_text(header + yaml.safe_dump(table, sort_keys=False, width=120))
    table = case_rows(table, contract_path, candidate_path)  # the tolerances are not judged there: any table does
    out.write_text(header + yaml.safe_dump(table, sort_keys=False, width=120))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
