"""Writing an exported package: `<out>/ferret_<op>/` with the judged file (`kernel.py`, byte for byte), the
boundary (`_boundary.py`), the stamped manifest and an `__init__.py` that registers `ferret::<op>` with
torch.library. The package needs torch (and the kernel's own language: Triton, or Ferret's CUDA backend)."""

from __future__ import annotations

import shutil
from pathlib import Path

from ferret.export import boundary
from ferret.export.models import ExportManifest, OpArgument
from ferret.export.signature import mutated

_INIT = '''"""{op_name}, exported by `ferret export` from a candidate that passed gate {gate_short}.

    import torch, {package}
    torch.ops.ferret.{op}({call})   # in place: {mutated_list}
    {package}.{op}({inputs})         # allocates and returns {outputs_list}

Schema: {op_name}{schema}
Profile of the passing verdict: {profile}. {note}
Every call is checked against the contract (dtypes, device, contiguity, shapes) before any launch.
"""

from __future__ import annotations

import torch

from . import _boundary
from . import kernel as _kernel

MANIFEST = _boundary.load_manifest(__file__)
OP_NAME = MANIFEST["op_name"]
SCHEMA = MANIFEST["schema"]
BoundaryError = _boundary.BoundaryError
_SPEC = _boundary.Spec(MANIFEST)


def _tensors({signature}) -> dict:
    return {{{mapping}}}


@torch.library.custom_op(OP_NAME, mutates_args={mutates!r}, schema=SCHEMA)
def {op}_({signature}) -> None:
    tensors = _tensors({call})
    _SPEC.check(tensors)
    inputs, outputs = _SPEC.split(tensors)
    _kernel.run(inputs, outputs, dict(_SPEC.params))


@{op}_.register_fake
def _({signature}) -> None:
    _SPEC.check(_tensors({call}))


def {op}({input_signature}):
    """The functional form: allocates the outputs, calls {op_name}, returns {outputs_list}."""
    outputs = _SPEC.allocate(_tensors_in({inputs}))
    torch.ops.ferret.{op}({inputs}, **outputs)
    return {returned}


def _tensors_in({input_signature}) -> dict:
    return {{{input_mapping}}}
'''


def init_source(manifest: ExportManifest) -> str:
    """The package's `__init__.py`: every argument a Tensor, in the schema's order."""
    args: list[OpArgument] = manifest.arguments
    names = [a.name for a in args]
    inputs = [a.name for a in args if a.role != "out"]
    outputs = [a.name for a in args if a.role == "out"]
    return _INIT.format(
        op_name=manifest.op_name,
        op=manifest.op,
        package=package_name(manifest.op),
        gate_short=manifest.gate_hash[:16],
        schema=manifest.schema_,
        profile=manifest.profile,
        note=manifest.verdict_note,
        signature=", ".join(f"{n}: torch.Tensor" for n in names),
        input_signature=", ".join(f"{n}: torch.Tensor" for n in inputs),
        call=", ".join(names),
        inputs=", ".join(inputs),
        mapping=", ".join(f'"{n}": {n}' for n in names),
        input_mapping=", ".join(f'"{n}": {n}' for n in inputs),
        mutates=tuple(mutated(args)),
        mutated_list=", ".join(mutated(args)),
        outputs_list=", ".join(outputs),
        returned=", ".join(f'outputs["{n}"]' for n in outputs),
    )


def package_name(op: str) -> str:
    return f"ferret_{op}"


def write_package(manifest: ExportManifest, candidate: Path, out: Path) -> Path:
    """Write the package under `out` and return its folder. An existing package of the op there is replaced
    whole: nothing of an earlier export may be left beside a new kernel."""
    folder = out / package_name(manifest.op)
    staging = out / f".{folder.name}.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    shutil.copyfile(candidate, staging / boundary.KERNEL_FILE)
    shutil.copyfile(boundary.__file__, staging / "_boundary.py")
    (staging / boundary.MANIFEST_FILE).write_text(manifest.model_dump_json(indent=1, by_alias=True) + "\n")
    (staging / "__init__.py").write_text(init_source(manifest))
    shutil.rmtree(folder, ignore_errors=True)
    staging.rename(folder)
    return folder
