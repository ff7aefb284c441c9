"""The LLM optimizer: the contract, the baseline and earlier rounds' feedback in, one candidate out."""

from __future__ import annotations

from pathlib import Path

from ferret.models.base import Model
from ferret.roles.base import OptimizerContext, Proposal
from ferret.roles.prompts import call_tool


class LLMOptimizer:
    """Renders agents/optimizer/prompt.md.j2 and asks the model for one `submit_candidate` tool call."""

    def __init__(self, model: Model, agents_dir: Path):
        self.model = model
        self.agents_dir = agents_dir
        self.name = f"llm:{model.name}"

    def propose(self, context: OptimizerContext) -> list[Proposal]:
        payload = call_tool(self.model, self.agents_dir, "optimizer", "submit_candidate", context.model_dump())
        return [Proposal.model_validate(payload)]
