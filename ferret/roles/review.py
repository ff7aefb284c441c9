"""Reviewers. The static one always runs; an LLM reviewer runs on top when a model is reachable."""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from ferret.models.base import Model, ModelError
from ferret.roles.base import (
    ReviewContext,
    ReviewFinding,
    ReviewVerdict,
    register_reviewer,
)


@register_reviewer("static")
class StaticReviewer:
    """Integrity from the static scan and the gate's integrity part alone; no opinion on the plan."""

    name = "static-scan"

    @classmethod
    def from_contract(cls, contract_path: Path) -> StaticReviewer:
        return cls()

    def review(self, context: ReviewContext) -> ReviewVerdict:
        findings = [
            ReviewFinding(
                file=d.file or context.candidate_path, line=d.line or 0, message=d.evidence.removeprefix(f"{d.file}:{d.line}: ")
            )
            for d in context.static_findings
        ]
        integrity_part = context.gate_summary.parts.get("integrity")
        gamed = bool(findings) or integrity_part == "fail"
        return ReviewVerdict(
            integrity="fail" if gamed else "pass",
            plan="pass",
            findings=findings,
            recommendation="static scan only: no LLM reviewer was reachable, so the plan was not reviewed",
            reviewer=self.name,
        )


class LLMReviewer:
    """Renders agents/reviewer/prompt.md.j2 and asks the model for one `submit_review` tool call."""

    def __init__(self, model: Model, agents_dir: Path):
        self.model = model
        self.agents_dir = agents_dir
        self.name = f"llm:{model.name}"

    def review(self, context: ReviewContext) -> ReviewVerdict:
        from ferret.roles.prompts import call_tool

        payload = call_tool(self.model, self.agents_dir, "reviewer", "submit_review", context.model_dump(by_alias=True))
        try:
            verdict = ReviewVerdict.model_validate({**payload, "reviewer": self.name})
        except ValidationError as err:
            fields = ", ".join(".".join(map(str, e["loc"])) + f": {e['msg']}" for e in err.errors())
            raise ModelError(f"{self.model.name}: submit_review does not fit the verdict ({fields})") from None
        static = StaticReviewer().review(context)
        if static.integrity == "fail":
            # The static scan's word stands whatever the model says.
            verdict = verdict.model_copy(update={"integrity": "fail", "findings": static.findings + verdict.findings})
        return verdict
