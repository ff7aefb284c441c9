"""The test-writer's adviser (ferret/roles/test_writer.py): which proposed cases may join a gate, and the
LLM adviser driven by the scripted test model through its `submit_cases` tool."""

from __future__ import annotations

from pathlib import Path

from ferret.contract.load import load_contract
from ferret.models.testing import ScriptedModel, tool_call_response
from ferret.roles import base
from ferret.roles import (
    test_writer as writers,  # imported as a module: pytest would collect its Test* names
)
from ferret.roles.test_writer import (
    CaseAdvice,
    LLMCaseAdviser,
    NoExtraCases,
    merge_cases,
)

REPO = Path(__file__).resolve().parents[2]
CONTRACT = load_contract(REPO / "contracts" / "rmsnorm.yaml")


def advice(*cases, **kwargs) -> CaseAdvice:
    return CaseAdvice.from_tool_input({"cases": list(cases), "stage_checks": [], "notes": "", **kwargs})


def case(name="wide_block_edge", profile="cpu", **fields):
    return {
        "profile": profile,
        "name": name,
        "kind": "edge",
        "dims": {"M": 3, "N": 1025},
        "seed": 9,
        "description": "one column past a power of two",
        **fields,
    }


def test_a_valid_case_joins_its_profile_and_the_original_contract_is_untouched():
    merged, accepted, rejected = merge_cases(CONTRACT, advice(case(), case("gpu_odd", profile="gpu", dims={"M": 5, "N": 7169})))
    assert accepted == ["cpu:wide_block_edge", "gpu:gpu_odd"] and rejected == []
    assert merged.cases_for("cpu")[-1].name == "wide_block_edge" and merged.cases_for("cpu")[-1].dims == {"M": 3, "N": 1025}
    assert merged.cases_for("gpu")[-1].name == "gpu_odd"
    assert "wide_block_edge" not in {c.name for c in CONTRACT.cases_for("cpu")}


def test_cases_that_do_not_fit_the_contract_are_refused_with_the_reason():
    proposals = [
        case("missing_dim", dims={"M": 3}),
        case("zero_dim", dims={"M": 0, "N": 4}),
        case("typical"),  # the contract has a case of that name
        case("unknown_input", edits=[{"input": "bias", "set": "zeros_rows", "rows": [0]}]),
        case("too_big", dims={"M": 4096, "N": 7168}),
        case("bad_kind", kind="stress"),
        case("no_profile", profile="tpu"),
    ]
    merged, accepted, rejected = merge_cases(CONTRACT, advice(*proposals))
    assert accepted == [] and merged == CONTRACT
    reasons = dict(r.split(": ", 1) for r in rejected)
    assert "dims must be exactly ['M', 'N']" in reasons["cpu:missing_dim"]
    assert "dims must be >= 1" in reasons["cpu:zero_dim"]
    assert "exists" in reasons["cpu:typical"]
    assert "no input named 'bias'" in reasons["cpu:unknown_input"]
    assert "more than the largest cpu case" in reasons["cpu:too_big"]
    assert "not a valid case" in reasons["cpu:bad_kind"]
    # One proposal with a bad profile is refused alone; it does not throw the whole answer away.
    assert "profile must be cpu or gpu" in reasons["tpu:no_profile"]


def test_two_proposals_with_one_name_keep_the_first():
    _, accepted, rejected = merge_cases(CONTRACT, advice(case(), case()))
    assert accepted == ["cpu:wide_block_edge"] and len(rejected) == 1 and "exists" in rejected[0]


def test_the_llm_adviser_asks_for_submit_cases_and_never_shows_a_candidate():
    model = ScriptedModel(
        [
            tool_call_response(
                "submit_cases",
                cases=[case()],
                stage_checks=[{"stage": "inv_rms", "check": "1/sqrt(eps) on an all-zero row", "why": "catches a dropped eps"}],
                notes="one width past a power of two",
            )
        ]
    )
    writer = LLMCaseAdviser(model, REPO / "agents")
    assert isinstance(writer, base.TestWriter) and writer.name == "llm:scripted"
    context = writers.TestWriterContext(
        op="rmsnorm", contract_yaml=(REPO / "contracts/rmsnorm.yaml").read_text(), reference_doc="y = x * rsqrt"
    )
    result = writer.propose_cases(context)
    assert [c.case["name"] for c in result.cases] == ["wide_block_edge"] and result.cases[0].profile == "cpu"
    assert result.stage_checks[0].stage == "inv_rms" and result.notes
    request = model.requests[0]
    assert request.tools[0].name == "submit_cases"
    assert "op: rmsnorm" in request.messages[0].content and "def run(" not in request.messages[0].content


def test_offline_adviser_proposes_nothing_and_says_so():
    assert base.TEST_WRITERS["contract-cases"] is NoExtraCases
    result = NoExtraCases().propose_cases(writers.TestWriterContext(op="rmsnorm", contract_yaml="", reference_doc=""))
    assert result.cases == [] and "contract's own cases only" in result.notes
