"""Float8 storage in contracts: an input declared in float8 with its block scales, drawn quantized, round-tripped.

A float8 tensor's codes mean nothing without their scales, so a float8 input must name them (`Input.scales`); no
dtype variant, `$dtype` input or output may be float8. The FP8 MLA contract (contracts/mla_attention_fp8.yaml) is the
real user; these tests hold the rules on small copies of it.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load, save
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from ferret_testkit import CONTRACTS, REPO  # noqa: E402

from ferret.cli.main import app  # noqa: E402
from ferret.contract.load import ContractError, load_contract  # noqa: E402
from ferret.contract.model import FLOAT8_MAX  # noqa: E402
from ferret.gate.inputs import draw_inputs, quantize_blocks  # noqa: E402

FP8_CONTRACT = CONTRACTS / "mla_attention_fp8.yaml"


def _fp8_data() -> dict:
    return yaml.safe_load(FP8_CONTRACT.read_text())


def _write(tmp_path: Path, data: dict) -> Path:
    folder = tmp_path / "contracts"
    folder.mkdir(exist_ok=True)
    (folder / "mla_attention_fp8.tolerances.yaml").write_text((CONTRACTS / "mla_attention_fp8.tolerances.yaml").read_text())
    if not (tmp_path / "tasks").exists():
        (tmp_path / "tasks").symlink_to(REPO / "tasks", target_is_directory=True)
    path = folder / "mla_attention_fp8.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False, width=10_000))
    return path


def _input(data: dict, name: str) -> dict:
    return next(i for i in data["inputs"] if i["name"] == name)


def _error(tmp_path: Path, mutate) -> str:
    data = copy.deepcopy(_fp8_data())
    mutate(data)
    with pytest.raises(ContractError) as info:
        load_contract(_write(tmp_path, data))
    return str(info.value)


def test_a_float8_input_without_its_scales_is_an_error_naming_the_field(tmp_path):
    message = _error(tmp_path, lambda d: _input(d, "kv_latent").pop("scales"))
    assert "inputs.kv_latent.scales" in message and "float8_e4m3fn" in message


def test_ferret_check_exits_2_on_float8_without_scales(tmp_path):
    data = copy.deepcopy(_fp8_data())
    _input(data, "kv_latent").pop("scales")
    path = _write(tmp_path, data)
    candidate = REPO / "tasks" / "mla_attention_fp8" / "candidates" / "triton_mla_fp8.py"
    result = CliRunner().invoke(app, ["check", str(path), str(candidate), "--gates-dir", str(tmp_path / "g"), "--profile", "cpu"])
    assert result.exit_code == 2, result.output
    assert "GATE_RESULT" not in result.stdout and "inputs.kv_latent.scales" in " ".join(result.stderr.split())


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda d: _input(d, "kv_rope").update(scales={"input": "kv_scale", "block": 16}), "inputs.kv_rope.scales"),
        (lambda d: _input(d, "kv_latent")["scales"].update(input="nowhere"), "inputs.kv_latent.scales.input"),
        (lambda d: _input(d, "kv_scale").update(dtype="bfloat16"), "inputs.kv_latent.scales.input"),
        (lambda d: _input(d, "kv_scale").update(role="in"), "inputs.kv_latent.scales.input"),
        (lambda d: _input(d, "kv_latent")["scales"].update(block=64), "inputs.kv_latent.scales.block"),
        (lambda d: d.update(dtypes=["float8_e4m3fn"]), "dtypes"),
        (lambda d: d["outputs"][0].update(dtype="float8_e4m3fn"), "outputs.o_heads.dtype"),
    ],
    ids=["scales_on_bf16", "unknown_scales", "scales_not_float32", "scales_not_inout", "wrong_block", "variant", "output"],
)
def test_float8_misdeclared_is_an_error_naming_the_field(tmp_path, mutate, field):
    assert f"{field}:" in _error(tmp_path, mutate)


def test_the_fp8_contract_declares_its_storage():
    contract = load_contract(FP8_CONTRACT)
    latent = next(i for i in contract.inputs if i.name == "kv_latent")
    assert latent.dtype == "float8_e4m3fn" and latent.scales is not None
    assert (latent.scales.input, latent.scales.block) == ("kv_scale", 128)


def test_drawn_float8_inputs_are_quantized_per_block_with_their_scales():
    contract = load_contract(FP8_CONTRACT)
    case = contract.cases.cpu[0]
    inputs = draw_inputs(contract, case, "bfloat16")
    codes, scales = inputs["kv_latent"], inputs["kv_scale"]
    assert codes.dtype == torch.float8_e4m3fn and scales.dtype == torch.float32
    assert scales.shape == codes.shape[:-1] + (4,)
    blocks = codes.float().view(*codes.shape[:-1], 4, 128)
    # each block's largest code is e4m3's largest finite value, and every scale is positive (normal draws)
    assert torch.equal(blocks.abs().amax(-1), torch.full_like(scales, FLOAT8_MAX["float8_e4m3fn"]))
    assert bool((scales > 0).all())
    again = draw_inputs(contract, case, "bfloat16")  # the same case gives the same bytes
    assert torch.equal(again["kv_latent"].view(torch.uint8), codes.view(torch.uint8))


def test_quantize_blocks_of_zeros_gives_scale_zero_and_codes_zero():
    values = torch.zeros(2, 256, dtype=torch.float64)
    values[1, 128:] = torch.linspace(-3, 3, 128, dtype=torch.float64)
    codes, scales = quantize_blocks(values, "float8_e4m3fn", 128)
    assert scales.tolist() == [[0.0, 0.0], [0.0, pytest.approx(3 / 448)]]
    assert not codes[0].float().any() and not codes[1, :128].float().any()
    dequantized = codes[1, 128:].double() * scales[1, 1].double()
    assert torch.allclose(dequantized, values[1, 128:], rtol=2.0**-4, atol=1e-6)


def test_float8_tensors_round_trip_through_safetensors_bitwise():
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(torch.float8_e4m3fn)
    back = load(save({"codes": codes}))["codes"]
    assert back.dtype == torch.float8_e4m3fn and torch.equal(back.view(torch.uint8), codes.view(torch.uint8))


def test_the_roofline_counts_a_float8_element_as_one_byte():
    contract = load_contract(FP8_CONTRACT)
    specs = contract.tensor_specs({"B": 2, "H": 4, "L": 40}, "bfloat16")
    assert specs["kv_latent"].nbytes == 2 * 40 * 512
