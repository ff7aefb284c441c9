"""The multi-token contract's tolerance table, by the bf16 contract's method (tasks/mla_attention/derive_tolerances.py).

    python -m tasks.mla_attention_mtp.derive_tolerances [--seeds 16] [--check-seeds 4]

1. `ferret calibrate` (ferret/gate/calibrate.py) over the honest implementations, the eager baseline and the Triton
   candidate (both faithful: accumulators and softmax statistics in float32, bf16 only for product operands, P and
   stored stages): each stage's largest error against the float64 reference over `--seeds` seeds of every CPU case
   variant, x calibrate's margin 4, floored at 8 float32 rounding units; row bounds (max_row_rel) likewise, at the
   bf16 contract's ROW_MARGIN (4); then the false-rejection rate on fresh seeds.
2. The bf16 contract's rules (`finish`): the stages at and after the flash loop (its DERIVED_STAGES: probs, o_latent,
   o_heads) take their L2 metrics (DERIVED_METRICS: rel_l2, cosine_min) from the largest faithful error x 3, the
   bf16 contract's margin (a cut of an accumulator or a statistic adds to the faithful error, and a wide margin would
   admit it); kv_cache's rel_l2 is at least bf16's unit roundoff 2^-8 (a cache of one row holds nothing but its
   appended row, rounded once), as the bf16 table's; scores keep the bf16 table's scale_floor and peak_floor (the
   same inputs' natural scale, for cases whose few scores are all near zero); a stage whose rows no CPU case judged
   takes the bf16 table's row bound for it.
"""

from __future__ import annotations

import argparse
import datetime as _dt
from pathlib import Path

import yaml

from ferret.gate.calibrate import FLOAT32_UNIT_ROUNDOFF, FLOOR_UNITS, _tolerance_from, calibrate
from tasks.mla_attention.derive_tolerances import DERIVED_METRICS, DERIVED_STAGES, ROW_MARGIN

ROOT = Path(__file__).resolve().parents[2]
CONTRACT = ROOT / "contracts" / "mla_attention_mtp.yaml"
BF16_TABLE = ROOT / "contracts" / "mla_attention.tolerances.yaml"
CANDIDATE = ROOT / "tasks" / "mla_attention_mtp" / "candidates" / "triton_mla_mtp.py"
CALIBRATE_MARGIN = 4.0
DERIVED_MARGIN = 3.0
BF16_ROUNDOFF = 2.0**-8
NOTE = (
    "; then (tasks/mla_attention_mtp/derive_tolerances.py finish, the bf16 contract's rules): {stages}: {metrics} from "
    "the largest faithful error x {margin}; kv_cache's rel_l2 at least bf16's unit roundoff 2^-8; scores' scale_floor "
    "and peak_floor the bf16 contract's; a stage whose rows no CPU case judged the bf16 contract's row bound for it"
)


def finish(table: dict, bf16_table: dict) -> dict:
    """calibrate's table with the bf16 contract's rules (the module's docstring)."""
    floor = FLOOR_UNITS * FLOAT32_UNIT_ROUNDOFF
    for dtype, stages in table["by_dtype"].items():
        observed, bf16_rows = table["observed"][dtype], bf16_table["by_dtype"][dtype]
        for stage, row in stages.items():
            if observed[stage].get("max_row_rel", 1.0) == 0.0 and "max_row_rel" in bf16_rows.get(stage, {}):
                row["max_row_rel"] = bf16_rows[stage]["max_row_rel"]
            if stage in DERIVED_STAGES:
                derived = _tolerance_from(observed[stage], DERIVED_MARGIN, floor).model_dump(exclude_none=True)
                row.update({metric: derived[metric] for metric in DERIVED_METRICS})
        cache = stages["kv_cache"]
        if cache["rel_l2"] < BF16_ROUNDOFF:
            cache["rel_l2"] = BF16_ROUNDOFF
            cache["cosine_min"] = min(cache["cosine_min"], 1.0 - BF16_ROUNDOFF**2 / 2)
        stages["scores"].update({k: bf16_rows["scores"][k] for k in ("scale_floor", "peak_floor")})
    table["provenance"] += NOTE.format(
        stages=", ".join(DERIVED_STAGES), metrics=" and ".join(DERIVED_METRICS), margin=DERIVED_MARGIN
    )
    return table


def main(contract: Path = CONTRACT, candidate: Path = CANDIDATE, module: str = "tasks.mla_attention_mtp") -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=16)
    parser.add_argument("--check-seeds", type=int, default=4)
    parser.add_argument("--force", action="store_true", help="write a table looser than the one in force")
    args = parser.parse_args()
    assert CALIBRATE_MARGIN == ROW_MARGIN  # calibrate's margin gives the row bounds too
    out = calibrate(
        contract,
        seeds=args.seeds,
        margin=CALIBRATE_MARGIN,
        check_seeds=args.check_seeds,
        candidates=[candidate],
        progress=print,
        force=args.force,
    )
    text = out.read_text()
    header = "".join(line for line in text.splitlines(keepends=True) if line.startswith("#") and "Do not edit" not in line)
    header += (
        f"# Then `python -m {module}.derive_tolerances --seeds {args.seeds}`'s rules "
        f"(tasks/mla_attention_mtp/derive_tolerances.py), {_dt.date.today().isoformat()}. Do not edit by hand.\n"
    )
    table = finish(yaml.safe_load(text), yaml.safe_load(BF16_TABLE.read_text()))
    out.write_text(header + yaml.safe_dump(table, sort_keys=False, width=120))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
