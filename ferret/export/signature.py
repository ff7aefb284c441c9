"""The exported op's signature, derived from the contract's ABI: its inputs in order, then its outputs, each a
Tensor; `inout` inputs and outputs are mutated (the candidate writes them in place), and the op returns nothing.
Params are not arguments: the kernel was judged on the contract's values only, so they are fixed in the package."""

from __future__ import annotations

import keyword

from ferret.contract.model import Contract
from ferret.errors import ContractError
from ferret.export.models import OpArgument


def op_arguments(contract: Contract) -> list[OpArgument]:
    """The op's arguments; a ContractError where the contract cannot be called as an op (a dim no shape names
    alone cannot be read from the tensors, so no call could be checked against it)."""
    arguments = [OpArgument(name=i.name, role=i.role, dtype=i.dtype, shape=list(i.shape)) for i in contract.inputs]
    arguments += [OpArgument(name=o.name, role="out", dtype=o.dtype, shape=list(o.shape)) for o in contract.outputs]
    problems = [f"{a.name}: a Python keyword cannot name an argument" for a in arguments if keyword.iskeyword(a.name)]
    bare = {e for a in arguments for e in a.shape if isinstance(e, str) and e.isidentifier()}
    used = {d for case in contract.cases.cpu + contract.cases.gpu for d in case.dims}
    problems += [f"dim {d} is named alone by no input's or output's shape: a call cannot give it" for d in sorted(used - bare)]
    if problems:
        raise ContractError(f"contract {contract.op} cannot be exported as an op: " + "; ".join(problems))
    return arguments


def schema(arguments: list[OpArgument]) -> str:
    """The torch.library schema: mutated tensors each in an alias set of their own, as torch infers them."""
    mutated = [a.name for a in arguments if a.role != "in"]
    parts = [f"Tensor(a{mutated.index(a.name)}!) {a.name}" if a.name in mutated else f"Tensor {a.name}" for a in arguments]
    return "(" + ", ".join(parts) + ") -> ()"


def mutated(arguments: list[OpArgument]) -> list[str]:
    return [a.name for a in arguments if a.role != "in"]
