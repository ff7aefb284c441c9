"""The reviewers (ferret/roles/review.py): the static one reads the scan's findings and the gate's
integrity part; the LLM one is driven here by the scripted test model, and the static scan's word on
integrity stands whatever the model says."""

from pathlib import Path

import pytest

from ferret.gate.models import Detection, VerdictSummary
from ferret.models.testing import ScriptedModel, tool_call_response
from ferret.roles.base import ReviewContext
from ferret.roles.review import LLMReviewer, StaticReviewer

AGENTS = Path(__file__).resolve().parents[2] / "agents"
FINDING = Detection(
    cheat="lower_precision",
    catalogue=[4],
    source="static",
    file="candidate.py",
    line=7,
    evidence="candidate.py:7: lower precision (docs/cheats.md 4): a cast to bfloat16 [lower_precision]",
)
SUMMARY = {"first_failing_stage": None, "gate": "0f" * 32, "candidate_sha256": "ab" * 32, "timing": {"measured": False}}


def _context(static_findings=(), integrity_part="pass") -> ReviewContext:
    return ReviewContext(
        op="rmsnorm",
        candidate_path="candidate.py",
        candidate_source="def run(inputs, outputs, params): ...\n",
        gate_summary=VerdictSummary.model_validate({**SUMMARY, "pass": True, "parts": {"integrity": integrity_part}}),
        static_findings=list(static_findings),
    )


def test_static_reviewer_fails_integrity_on_a_finding_and_names_its_line():
    verdict = StaticReviewer().review(_context([FINDING]))
    assert verdict.integrity == "fail" and verdict.plan == "pass"
    assert [(f.file, f.line) for f in verdict.findings] == [("candidate.py", 7)]
    assert verdict.findings[0].message.startswith("lower precision")


def test_static_reviewer_fails_integrity_when_the_gate_did_and_passes_a_clean_candidate():
    assert StaticReviewer().review(_context(integrity_part="fail")).integrity == "fail"
    clean = StaticReviewer().review(_context())
    assert clean.integrity == "pass" and clean.findings == []


@pytest.mark.quick
def test_a_static_finding_fails_integrity_whatever_the_model_says():
    model = ScriptedModel(
        [tool_call_response("submit_review", integrity="pass", plan="pass", findings=[], recommendation="ship it")]
    )
    verdict = LLMReviewer(model, AGENTS).review(_context([FINDING]))
    assert verdict.integrity == "fail" and verdict.plan == "pass" and verdict.reviewer == "llm:scripted"
    assert [(f.file, f.line) for f in verdict.findings] == [("candidate.py", 7)]
    assert FINDING.evidence in model.requests[0].messages[0].content  # the model was shown the finding too


def test_without_a_static_finding_the_models_verdict_stands():
    model = ScriptedModel(
        [
            tool_call_response(
                "submit_review",
                integrity="fail",
                plan="fail",
                findings=[{"file": "candidate.py", "line": 3, "message": "skips heads"}],
                recommendation="compute every head",
            )
        ]
    )
    verdict = LLMReviewer(model, AGENTS).review(_context())
    assert (verdict.integrity, verdict.plan) == ("fail", "fail") and verdict.findings[0].message == "skips heads"


def test_a_review_that_does_not_fit_the_verdict_is_a_model_error_naming_the_field():
    import pytest

    from ferret.models.base import ModelError

    model = ScriptedModel(
        [tool_call_response("submit_review", integrity="probably", plan="pass", findings=[], recommendation="")]
    )
    with pytest.raises(ModelError, match="integrity"):
        LLMReviewer(model, AGENTS).review(_context())
