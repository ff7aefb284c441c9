"""Reading contract files, with errors that name the file, the field, the line and what was expected."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from ferret.contract.imports import load_entry, project_root_of
from ferret.contract.model import Contract
from ferret.errors import ContractError


def _line_of(root: yaml.Node | None, loc: tuple[Any, ...]) -> int | None:
    """The 1-based line of the YAML node at `loc`, or of its nearest existing parent."""
    node, line = root, None
    for key in loc:
        if node is None:
            break
        line = node.start_mark.line + 1
        if isinstance(node, yaml.MappingNode):
            node = next((v for k, v in node.value if getattr(k, "value", None) == str(key)), None)
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and key < len(node.value):
            node = node.value[key]
        elif isinstance(node, yaml.SequenceNode):
            # Cross-field checks name list items by their `name` (e.g. `outputs.y`).
            node = next(
                (
                    item
                    for item in node.value
                    if isinstance(item, yaml.MappingNode)
                    and any(getattr(k, "value", None) == "name" and getattr(v, "value", None) == str(key) for k, v in item.value)
                ),
                None,
            )
        else:
            node = None
    if node is not None:
        line = node.start_mark.line + 1
    return line


def _read_yaml(path: Path) -> tuple[Any, yaml.Node | None]:
    try:
        text = path.read_text()
    except OSError as err:
        raise ContractError(f"{path}: cannot read contract ({err.strerror})") from None
    try:
        return yaml.safe_load(text), yaml.compose(text)
    except yaml.YAMLError as err:
        raise ContractError(f"{path}: not valid YAML: {err}") from None


def load_contract(path: str | Path, require_tolerances: bool = True) -> Contract:
    """Load and validate `contracts/<op>.yaml` (and the tolerance table file it names).

    `require_tolerances=False` is for `ferret calibrate`, which derives the table a contract names.
    """
    path = Path(path)
    data, root = _read_yaml(path)
    if not isinstance(data, dict):
        raise ContractError(f"{path}: expected a mapping of contract fields at the top level")
    tolerances = data.get("tolerances")
    # Errors inside a separate tolerance table are reported against that file and its lines.
    tol_source: tuple[Path, yaml.Node | None] | None = None
    if isinstance(tolerances, str):
        tol_path = path.parent / tolerances
        tol_data, tol_root = _read_yaml(tol_path) if tol_path.exists() else (None, None)
        if tol_data is None and not require_tolerances:
            data = {k: v for k, v in data.items() if k != "tolerances"}
        elif tol_data is None:
            raise ContractError(f"{path}: tolerances: file {tol_path} does not exist; derive it with `ferret calibrate {path}`")
        else:
            data = {**data, "tolerances": tol_data}
            tol_source = (tol_path, tol_root)
    try:
        contract = Contract.model_validate(data)
    except ValidationError as err:
        lines = []
        for e in err.errors():
            loc = tuple(e["loc"])
            if not loc and e["type"] == "value_error":
                # A cross-field check: one message listing "field.path: problem" items.
                for problem in str(e["msg"]).removeprefix("Value error, ").split("; "):
                    field, _, text = problem.partition(": ")
                    parts = tuple(int(p) if p.isdigit() else p for p in field.split("."))
                    line = _line_of(root, parts)
                    lines.append(f"{path}:{line}: {field}: {text}" if line else f"{path}: {problem}")
                continue
            field = ".".join(str(p) for p in loc) or "(top level)"
            if tol_source is not None and len(loc) > 1 and loc[0] == "tolerances":
                file, line = tol_source[0], _line_of(tol_source[1], loc[1:])
            else:
                file, line = path, _line_of(root, loc)
            where = f"{file}:{line}" if line else str(file)
            got = "" if e["type"] == "missing" else f" (got {e.get('input')!r:.80})"
            lines.append(f"{where}: {field}: {e['msg']}{got}")
        raise ContractError("invalid contract\n  " + "\n  ".join(lines)) from None
    contract._project_root = project_root_of(path)
    _check_layout_entry(contract, path, root)
    return contract


def _check_layout_entry(contract: Contract, path: Path, root: yaml.Node | None) -> None:
    """A layout entry that does not resolve is a contract error now, not a failure in the middle of a gate build."""
    if contract.layout is None:
        return
    try:
        load_entry(contract.layout.entry, contract.source_root)
    except ValueError as err:
        line = _line_of(root, ("layout", "entry"))
        raise ContractError(f"{path}:{line}: layout.entry: {err}" if line else f"{path}: layout.entry: {err}") from None


def tolerance_file(path: str | Path) -> Path | None:
    """The tolerance table file a contract names (`tolerances: <file>`, beside the contract), or None when
    its tolerances are inline or absent."""
    path = Path(path)
    data, _ = _read_yaml(path)
    tolerances = data.get("tolerances") if isinstance(data, dict) else None
    return path.parent / tolerances if isinstance(tolerances, str) else None


def contract_json_schema() -> dict[str, Any]:
    return Contract.model_json_schema()
