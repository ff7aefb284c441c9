"""The test-writer's adviser: extra cases for the gate, proposed from the contract, never golden values.

The gate is built by the test-writer process (`ferret.gate.build`) from a contract's cases alone. Before
a run's gate is built, an adviser may propose more cases in the contract's case format (and stage checks,
recorded for the reviewer). `merge_cases` accepts a proposed case only if it is a valid case of this
contract: the profile's exact dims, known inputs in its edits, a new name, and inputs no larger than the
largest case the contract's authors set for that profile. Accepted cases are drawn and computed by the
canonical reference like every other; the adviser never sees a candidate or a golden value.

    advice = LLMCaseAdviser(model, agents_dir).propose_cases(context)
    contract, accepted, rejected = merge_cases(contract, advice)
"""

from __future__ import annotations

import math
from pathlib import Path

from pydantic import ValidationError

from ferret.contract.model import Case, Contract
from ferret.contract.shapes import evaluate_shape
from ferret.models.base import Model

# The adviser's models live in ferret.roles.base, beside the TestWriter protocol they type (so base needs
# nothing from here); they stay importable from this module, hence __all__.
from ferret.roles.base import (
    CaseAdvice,
    ProposedCase,
    StageCheck,
    TestWriterContext,
    register_test_writer,
)

__all__ = [
    "CaseAdvice",
    "ContractCasesOnly",
    "LLMCaseAdviser",
    "LLMTestWriter",
    "NoExtraCases",
    "ProposedCase",
    "StageCheck",
    "TestWriterContext",
    "merge_cases",
]


@register_test_writer("contract-cases")
class NoExtraCases:
    """The adviser that needs no model: it proposes no case, so the gate holds the contract's own cases,
    and the run log says so."""

    name = "contract-cases"

    @classmethod
    def from_contract(cls, contract_path: Path) -> NoExtraCases:
        return cls()

    def propose_cases(self, context: TestWriterContext) -> CaseAdvice:
        return CaseAdvice(notes="no LLM test-writer was reachable: the gate holds the contract's own cases only")


class LLMCaseAdviser:
    """Renders agents/test_writer/prompt.md.j2 and asks the model for one `submit_cases` tool call."""

    def __init__(self, model: Model, agents_dir: Path):
        self.model = model
        self.agents_dir = agents_dir
        self.name = f"llm:{model.name}"

    def propose_cases(self, context: TestWriterContext) -> CaseAdvice:
        from ferret.roles.prompts import call_tool

        payload = call_tool(self.model, self.agents_dir, "test_writer", "submit_cases", context.model_dump())
        return CaseAdvice.from_tool_input(payload)


# The names before the advisers said what they are (tests/dispatch and tests/cli still import them).
ContractCasesOnly = NoExtraCases
LLMTestWriter = LLMCaseAdviser


def _input_bytes(contract: Contract, dims: dict[str, int]) -> int:
    from ferret.gate.inputs import resolve_dtype

    total = 0
    for spec in contract.inputs:
        dtype = resolve_dtype(spec.dtype, contract.primary_dtype)
        total += math.prod(evaluate_shape(spec.shape, dims)) * dtype.itemsize
    return total


def merge_cases(contract: Contract, advice: CaseAdvice) -> tuple[Contract, list[str], list[str]]:
    """(the contract with every acceptable proposed case added, accepted `profile:name`s, rejections with
    their reasons). The contract passed in is not changed."""
    accepted: list[str] = []
    rejected: list[str] = []
    merged = contract
    for proposal in advice.cases:
        label = f"{proposal.profile}:{proposal.case.get('name', '?')}"
        if proposal.profile not in ("cpu", "gpu"):
            rejected.append(f"{label}: profile must be cpu or gpu")
            continue
        existing = merged.cases_for(proposal.profile)
        try:
            case = Case.model_validate(proposal.case)
        except ValidationError as err:
            rejected.append(f"{label}: not a valid case: {'; '.join(e['msg'] for e in err.errors())}")
            continue
        wanted_dims = {d for c in contract.cases_for(proposal.profile) for d in c.dims}
        if set(case.dims) != wanted_dims:
            rejected.append(f"{label}: dims must be exactly {sorted(wanted_dims)}, got {sorted(case.dims)}")
            continue
        if case.name in {c.name for c in contract.cases.cpu + contract.cases.gpu + merged.cases_for(proposal.profile)}:
            rejected.append(f"{label}: a case of that name exists")
            continue
        try:
            size = _input_bytes(contract, case.dims)
        except (ValueError, KeyError, ZeroDivisionError) as err:
            rejected.append(f"{label}: shapes cannot be evaluated with these dims ({err})")
            continue
        largest = max(_input_bytes(contract, c.dims) for c in contract.cases_for(proposal.profile))
        if size > largest:
            rejected.append(
                f"{label}: inputs of {size} bytes, more than the largest {proposal.profile} case of the contract ({largest})"
            )
            continue
        data = merged.model_dump(mode="json")
        data["cases"][proposal.profile] = [c.model_dump(mode="json") for c in existing] + [case.model_dump(mode="json")]
        try:
            merged = Contract.model_validate(data)
        except ValidationError as err:
            rejected.append(f"{label}: {'; '.join(e['msg'] for e in err.errors())}")
            continue
        accepted.append(label)
    return merged, accepted, rejected
