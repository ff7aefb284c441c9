"""The multi-token tables (contiguous and paged) hold what tasks/mla_attention_mtp/derive_tolerances.py says it
derives: the bf16 contract's rules over calibrate's observed errors, and no honest run rejected while deriving them."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ferret.gate.calibrate import FLOAT32_UNIT_ROUNDOFF, FLOOR_UNITS
from tasks.mla_attention_mtp.derive_tolerances import BF16_ROUNDOFF, DERIVED_MARGIN, finish

CONTRACTS = Path(__file__).resolve().parents[3] / "contracts"
TABLES = ["mla_attention_mtp.tolerances.yaml", "mla_attention_mtp_paged.tolerances.yaml"]


def _load(name: str) -> dict:
    return yaml.safe_load((CONTRACTS / name).read_text())


@pytest.mark.parametrize("name", TABLES)
def test_the_table_follows_the_bf16_contracts_rules(name):
    table, bf16 = _load(name), _load("mla_attention.tolerances.yaml")["by_dtype"]["bfloat16"]
    rows, observed = table["by_dtype"]["bfloat16"], table["observed"]["bfloat16"]
    floor = FLOOR_UNITS * FLOAT32_UNIT_ROUNDOFF
    for stage in ("probs", "o_latent", "o_heads"):  # the flash loop's stages: margin 3 over the faithful error
        assert rows[stage]["rel_l2"] == float(f"{max(observed[stage]['rel_l2'] * DERIVED_MARGIN, floor):.3g}"), stage
    assert rows["kv_cache"]["rel_l2"] >= BF16_ROUNDOFF
    assert {k: rows["scores"][k] for k in ("scale_floor", "peak_floor")} == {
        k: bf16["scores"][k] for k in ("scale_floor", "peak_floor")
    }
    for stage, seen in observed.items():  # rows no CPU case judged: the bf16 table's row bound
        if seen.get("max_row_rel", 1.0) == 0.0:
            assert rows[stage]["max_row_rel"] == bf16[stage]["max_row_rel"], stage
    for runs in table["false_rejection"].values():
        assert runs["runs"] > 0 and runs["rejected"] == 0


def test_finish_raises_a_cache_bound_below_one_bf16_rounding():
    table = _load(TABLES[0])
    table["by_dtype"]["bfloat16"]["kv_cache"]["rel_l2"] = 1e-5
    finished = finish(table, _load("mla_attention.tolerances.yaml"))
    assert finished["by_dtype"]["bfloat16"]["kv_cache"]["rel_l2"] == BF16_ROUNDOFF
