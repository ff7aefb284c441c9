"""The paged contract, loaded once for the directory, and its CPU cases' inputs as the judge draws them (laid
out by the contract's layout)."""

from __future__ import annotations

from pathlib import Path

import pytest

CONTRACT = Path(__file__).resolve().parents[3] / "contracts" / "mla_attention_paged.yaml"


@pytest.fixture(scope="session")
def paged_contract():
    from ferret.contract.load import load_contract

    return load_contract(CONTRACT)


@pytest.fixture(scope="session")
def paged_drawn(paged_contract):
    """CPU case name -> its inputs, drawn as the judge draws them."""
    from ferret.gate.inputs import draw_inputs

    return {case.name: draw_inputs(paged_contract, case, "bfloat16") for case in paged_contract.cases_for("cpu")}
