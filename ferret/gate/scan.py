"""The static integrity scan as the judge uses it: every finding becomes a named detection."""

from __future__ import annotations

from pathlib import Path

from ferret.backends import registry
from ferret.contract.model import Contract
from ferret.gate.models import Detection


def _numbers(value) -> set[int]:
    if isinstance(value, bool):
        return set()
    if isinstance(value, (int, float)) and float(value).is_integer():
        return {int(value)}
    if isinstance(value, dict):
        return set().union(*map(_numbers, value.values())) if value else set()
    if isinstance(value, (list, tuple)):
        return set().union(*map(_numbers, value)) if value else set()
    return set()


def shape_constants(contract: Contract) -> set[int]:
    """The case dims of the contract: literals a candidate has no business comparing against. Numbers
    that are constants of the math (params, fixed sizes in shapes such as a head dim of 64) are not
    case dims, even where a case happens to use the same value."""
    values = {v for case in contract.cases.cpu + contract.cases.gpu for v in case.dims.values()}
    fixed = _numbers(contract.params)
    for spec in list(contract.inputs) + list(contract.outputs) + list(contract.stages):
        fixed |= {e for e in spec.shape if isinstance(e, int)}
    return {v for v in values if v > 2 and v not in fixed}


def storage_dtypes(contract: Contract) -> set[str]:
    """The float8 dtypes the contract declares as storage (inputs with their scales): casts to them are allowed."""
    return {str(i.dtype) for i in contract.inputs if i.scales is not None}


def scan_preset(path: Path) -> str:
    """The scan preset of the candidate's language (its backend's); the default language's for an unreadable file."""
    try:
        return registry.backend_for(Path(path).read_text(errors="replace")).scan_preset
    except OSError:
        return registry.backend(registry.DEFAULT).scan_preset


def scan_candidate(path: Path, contract: Contract) -> list[Detection]:
    from ferret.integrity.scan import scan_file

    result = scan_file(
        path, shape_constants=shape_constants(contract), preset=scan_preset(path), storage_dtypes=storage_dtypes(contract)
    )
    return [
        Detection(
            cheat=f.cheat,
            catalogue=list(f.catalogue),
            evidence=f"{Path(path).name}:{f.line}: {f.message} [{f.code[:120]}]",
            source="static",
            file=Path(path).name,
            line=f.line,
        )
        for f in result.findings
    ]
