"""The typed records of an export: the op's arguments as the contract declares them, and the manifest stamped
into the package (`manifest.json`), which the package's boundary reads back as plain JSON."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ferret.contract.shapes import ShapeExpr

CPU_PROFILE_NOTE = (
    "judged on the CPU profile only: correctness at small shapes under the Triton interpreter; "
    "not judged at production shapes on a GPU, and its speed was not measured"
)


class OpArgument(BaseModel):
    """One argument of the exported op, in schema order: the contract's inputs, then its outputs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    role: Literal["in", "inout", "out"] = Field(description="inout inputs and outputs are declared mutated in the schema.")
    dtype: str = Field(description="A torch dtype name, or `$dtype`: the dtype the call's `$dtype` arguments share.")
    shape: list[ShapeExpr] = Field(description="The contract's shape expressions over its dims.")


class ExportManifest(BaseModel):
    """What an exported package is, and why it may be trusted: the gate it passed and the file that passed it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: Literal[1] = 1
    op: str
    op_name: str = Field(description="The torch.library name, `ferret::<op>`: torch.ops.ferret.<op>.")
    schema_: str = Field(alias="schema", description="The op's schema as torch.library registers it.")
    arguments: list[OpArgument]
    dtypes: list[str] = Field(description="The dtypes the gate judged the `$dtype` arguments at.")
    params: dict[str, Any] = Field(description="The contract's params, fixed: the kernel was judged on these only.")
    gate_hash: str
    candidate_sha256: str = Field(description="sha256 of kernel.py, checked when the package is imported.")
    candidate_language: str
    profile: Literal["cpu", "gpu"] = Field(description="The profile of the passing verdict.")
    verdict_note: str = Field(description="What the passing verdict established (a CPU-profile export says so).")
    pass_recorded: dict[str, Any] = Field(description="The judge's record of the pass (ferret.gate.trust).")
    checked_at_export: bool = Field(description="Whether export ran the check itself, no pass being on record.")
    contract_sha256: str
    exported_at: str
    ferret_version: str
