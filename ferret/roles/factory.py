"""Roles named on the command line: `template-search`, `static`, or a model spec for an LLM role."""

from __future__ import annotations

from pathlib import Path

from ferret.contract.imports import project_root_of
from ferret.contract.load import load_contract

AGENTS = Path(__file__).resolve().parents[2] / "agents"


def make_optimizer(spec: str, contract_path: Path):
    if spec == "template-search":
        from ferret.roles.offline import TemplateSearchOptimizer

        op = load_contract(contract_path).op
        return TemplateSearchOptimizer(project_root_of(contract_path) / "tasks" / op / "templates")
    from ferret.models.registry import model_from_spec
    from ferret.roles.llm_optimizer import LLMOptimizer

    return LLMOptimizer(model_from_spec(spec), AGENTS)


def make_reviewer(spec: str):
    from ferret.roles.review import LLMReviewer, StaticReviewer

    if spec == "static":
        return StaticReviewer()
    from ferret.models.registry import model_from_spec

    return LLMReviewer(model_from_spec(spec), AGENTS)


def make_test_writer(spec: str):
    from ferret.roles.test_writer import ContractCasesOnly, LLMTestWriter

    if spec == "contract-cases":
        return ContractCasesOnly()
    from ferret.models.registry import model_from_spec

    return LLMTestWriter(model_from_spec(spec), AGENTS)
