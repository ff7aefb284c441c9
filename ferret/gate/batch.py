"""Batch invariance (opt-in, `cases.batch_invariance`): a request's output must not depend on which other
requests share its batch. The first and last requests of the profile's first correctness case (primary
dtype) run alone, with the batch dim 1, sliced from that case's inputs (in-place inputs too; inputs
without the batch dim unchanged); their outputs and in-place inputs must equal the full batch's rows bitwise."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file

from ferret import wire
from ferret.contract.model import Case, Contract
from ferret.gate.context import GateContext
from ferret.gate.inputs import prepare_inputs
from ferret.gate.metrics import bitwise_equal, where_different
from ferret.gate.models import Detection, PartResult


@dataclass
class BatchRequest:
    """One request of the full batch, run alone: the full batch's variant id and the request's index in it."""

    id: str
    case: Case
    dtype: str
    inputs: dict[str, torch.Tensor]
    full_id: str
    index: int


def _axis(shape: list[int | str], dim: str) -> int | None:
    return next((i for i, s in enumerate(shape) if s == dim), None)


def batch_requests(context: GateContext) -> list[BatchRequest]:
    """The requests to run alone; none when the contract does not ask for batch invariance."""
    contract, manifest, gate = context.contract, context.manifest, context.gate
    spec = contract.cases.batch_invariance
    record = next((r for r in manifest.variants if r.part == "correctness"), None)
    if spec is None or record is None:
        return []
    case = next(c for c in contract.cases_for(manifest.profile) if c.name == record.case)
    with tempfile.TemporaryDirectory(prefix="ferret-batch-") as folder:
        target = Path(folder) / "inputs.safetensors"
        prepare_inputs(contract, gate, record, target)
        full = load_file(str(target))
    size = case.dims[spec.dim]
    requests = []
    for index in sorted({0, size - 1}):
        inputs = {}
        for declared in contract.inputs:
            axis = _axis(declared.shape, spec.dim)
            tensor = full[declared.name]
            inputs[declared.name] = tensor if axis is None else tensor.narrow(axis, index, 1).contiguous().clone()
        alone = case.model_copy(update={"name": f"{case.name}_request{index}", "dims": case.dims | {spec.dim: 1}})
        requests.append(BatchRequest(f"{alone.name}@{record.dtype}", alone, record.dtype, inputs, record.id, index))
    return requests


def judge_batch(
    contract: Contract, requests: list[BatchRequest], statuses: dict[str, wire.VariantStatus | None], out: Path
) -> tuple[PartResult, list[Detection]]:
    """The part batch_invariance and, on a failure, a detection naming the case, the request and the first
    differing entry."""
    spec = contract.cases.batch_invariance
    if spec is None or not requests:
        return PartResult(status="skipped", detail="not asked for by the contract"), []
    full_status = statuses.get(requests[0].full_id)
    if full_status is None or not full_status.ok:
        return PartResult(status="fail", detail=f"the full batch {requests[0].full_id} did not run"), []
    full = load_file(str(out / wire.tensors_file(requests[0].full_id)))
    declared = [(o.name, o.shape, wire.fast_key) for o in contract.outputs]
    declared += [(i.name, i.shape, wire.inout_key) for i in contract.inputs if i.role == "inout"]
    failures: list[str] = []
    for request in requests:
        status = statuses.get(request.id)
        if status is None or not status.ok:
            message = status.message[:200] if status is not None else "no result"
            failures.append(f"{request.full_id} request {request.index} alone failed: {message}")
            continue
        alone = load_file(str(out / wire.tensors_file(request.id)))
        for name, shape, key in declared:
            axis = _axis(shape, spec.dim)
            row = full[key(0, name)]
            row = row if axis is None else row.narrow(axis, request.index, 1)
            if not bitwise_equal(alone[key(0, name)], row):
                failures.append(
                    f"case {request.full_id}, request {request.index} along {spec.dim}: {name} "
                    f"alone against in the batch: {where_different(alone[key(0, name)], row.contiguous())}"
                )
                break
    if not failures:
        return PartResult(status="pass", detail=f"{len(requests)} requests of {requests[0].full_id} bitwise equal alone"), []
    detection = Detection(
        cheat="batch_variant", catalogue=[], evidence="; ".join(failures), source="outputs", variant=requests[0].full_id
    )
    return PartResult(status="fail", detail="; ".join(f[:300] for f in failures)), [detection]
