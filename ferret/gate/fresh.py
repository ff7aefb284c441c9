"""Fresh private cases: drawn at check time with OS-random seeds and dims within the contract's ranges,
their golden values computed here, in the judge, by the canonical reference. They are written nowhere
the candidate can see before it has answered."""

from __future__ import annotations

import secrets
from dataclasses import dataclass

import torch

from ferret.contract.model import Case
from ferret.contract.task import Task
from ferret.gate.inputs import draw_inputs, tensor_content_sha256


@dataclass
class FreshVariant:
    id: str
    case: Case
    dtype: str
    seed: int
    inputs: dict[str, torch.Tensor]
    golden: dict[str, torch.Tensor]

    def input_digests(self) -> dict[str, str]:
        return {n: tensor_content_sha256(t) for n, t in self.inputs.items()}


def draw_fresh_cases(task: Task, profile: str, device: str) -> list[FreshVariant]:
    contract = task.contract
    fresh = contract.cases.fresh
    ranges = getattr(fresh, profile) if fresh is not None else {}
    if fresh is None or not ranges or fresh.count == 0:
        return []
    rng = secrets.SystemRandom()
    golden_dtype = torch.float32 if contract.reference.golden_dtype == "float32" else torch.float64
    drawn = []
    for number in range(1, fresh.count + 1):
        seed = secrets.randbits(62)
        dims = {dim: rng.randint(low, high) for dim, (low, high) in ranges.items()}
        case = Case(name=f"fresh{number}", dims=dims, seed=seed, description="drawn privately at check time")
        inputs = draw_inputs(contract, case, contract.primary_dtype)
        with torch.no_grad():
            stages = task.reference({k: v.to(device) for k, v in inputs.items()}, dict(contract.params))
        golden = {st.name: stages[st.name].detach().to("cpu", golden_dtype) for st in contract.stages}
        drawn.append(FreshVariant(f"{case.name}@{contract.primary_dtype}", case, contract.primary_dtype, seed, inputs, golden))
    return drawn
