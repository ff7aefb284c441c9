"""A dim the reference supports only in a range (`reference.supported_dims`): the multi-token MLA contract's s_q (dim
S, 1 to 4). A declared case or a fresh range outside it is a contract error naming the case's dim, before anything
runs; `ferret check` exits 2 on it.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from ferret_testkit import CONTRACTS, REPO  # noqa: E402

from ferret.cli.main import app  # noqa: E402
from ferret.contract.load import ContractError, load_contract  # noqa: E402

MTP = CONTRACTS / "mla_attention_mtp.yaml"


def _write(tmp_path: Path, data: dict) -> Path:
    folder = tmp_path / "contracts"
    folder.mkdir(exist_ok=True)
    (folder / "mla_attention_mtp.tolerances.yaml").write_text((CONTRACTS / "mla_attention_mtp.tolerances.yaml").read_text())
    if not (tmp_path / "tasks").exists():
        (tmp_path / "tasks").symlink_to(REPO / "tasks", target_is_directory=True)
    path = folder / "mla_attention_mtp.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False, width=10_000))
    return path


def _case(data: dict, profile: str, name: str) -> dict:
    return next(c for c in data["cases"][profile] if c["name"] == name)


def _error(tmp_path: Path, mutate) -> str:
    data = copy.deepcopy(yaml.safe_load(MTP.read_text()))
    mutate(data)
    with pytest.raises(ContractError) as info:
        load_contract(_write(tmp_path, data))
    return " ".join(str(info.value).split())


def test_the_shipped_contract_declares_s_q_from_1_to_4():
    contract = load_contract(MTP)
    assert contract.reference.supported_dims == {"S": (1, 4)}
    assert {c.dims["S"] for c in contract.cases.cpu + contract.cases.gpu} == {1, 2, 3, 4}


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda d: _case(d, "cpu", "four_tokens")["dims"].update(S=5), "cases.cpu.four_tokens.dims.S"),
        (lambda d: _case(d, "gpu", "tp1_b8_l4096")["dims"].update(S=8), "cases.gpu.tp1_b8_l4096.dims.S"),
        (lambda d: d["cases"]["fresh"]["cpu"].update(S=[1, 6]), "cases.fresh.cpu.S"),
        (lambda d: d["reference"]["supported_dims"].update(Q=[1, 2]), "reference.supported_dims.Q"),
        (lambda d: d["reference"]["supported_dims"].update(S=[3, 2]), "reference.supported_dims"),
    ],
    ids=["cpu_case", "gpu_case", "fresh_range", "unknown_dim", "empty_range"],
)
def test_an_s_q_outside_what_the_reference_supports_names_the_field(tmp_path, mutate, field):
    message = _error(tmp_path, mutate)
    assert field in message, message


def test_the_error_names_the_line_of_the_case(tmp_path):
    message = _error(tmp_path, lambda d: _case(d, "cpu", "four_tokens")["dims"].update(S=5))
    assert "mla_attention_mtp.yaml:" in message and "reference.supported_dims.S [1, 4]" in message, message


def test_ferret_check_exits_2_on_an_unsupported_s_q(tmp_path):
    data = copy.deepcopy(yaml.safe_load(MTP.read_text()))
    _case(data, "cpu", "typical")["dims"].update(S=5)
    path = _write(tmp_path, data)
    candidate = REPO / "tasks" / "mla_attention_mtp" / "candidates" / "triton_mla_mtp.py"
    result = CliRunner().invoke(app, ["check", str(path), str(candidate), "--gates-dir", str(tmp_path / "g"), "--profile", "cpu"])
    assert result.exit_code == 2, result.output
    assert "GATE_RESULT" not in result.stdout and "cases.cpu.typical.dims.S" in " ".join(result.stderr.split())
