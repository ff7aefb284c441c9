"""The roofline a contract declares: hand-worked counts on the real contracts, the generic count where a
contract declares none, and every bad expression refused at load time (file, field, line) and at
evaluation time (ContractError naming the field)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from ferret_testkit import CONTRACTS, line_of, write_contract  # noqa: E402

from ferret.contract.load import load_contract  # noqa: E402
from ferret.contract.model import Roofline  # noqa: E402
from ferret.contract.roofline import Filled, Scope, TensorSpec, count_roofline, evaluate  # noqa: E402
from ferret.errors import ContractError  # noqa: E402

MLA_DIMS = {"B": 3, "H": 2, "L": 8}


def _mla_inputs(cache_lens: list[int], dims: dict[str, int]) -> dict[str, torch.Tensor]:
    contract = load_contract(CONTRACTS / "mla_attention.yaml")
    specs = contract.tensor_specs(dims, "bfloat16")
    inputs = {n: torch.zeros(s.shape) for n, s in specs.items() if s.role != "out"}
    inputs["cache_lens"] = torch.tensor(cache_lens, dtype=torch.int32)
    return inputs


def test_every_real_contract_declares_a_roofline():
    for op in ("mla_attention", "rmsnorm", "softmax", "rope"):
        contract = load_contract(CONTRACTS / f"{op}.yaml")
        assert contract.roofline is not None and contract.roofline.description, op


def test_mla_hand_worked():
    # B=3, H=2, L=8, cache_lens = [3, 0, 7]: sum(cache_lens + 1) = 4 + 1 + 8 = 13 rows.
    # bytes: cache rows 13 * 576 * 2 = 14976; q_nope 3*2*128*2 = 1536; q_pe 3*2*64*2 = 768;
    #        kv_a 3*576*2 = 3456; kv_a_norm_weight 512*2 = 1024; w_kv_b 2*256*512*2 = 524288;
    #        positions 3*8 = 24; cache_lens 3*4 = 12; o_heads 3*2*128*2 = 1536
    #        total 14976 + 1536 + 768 + 3456 + 1024 + 524288 + 24 + 12 + 1536 = 547620
    # flops: 2*2*13*1088 = 56576 (scores and o_latent) + 4*3*2*128*512 = 1572864 (absorption) = 1629440
    contract = load_contract(CONTRACTS / "mla_attention.yaml")
    count = count_roofline(contract, MLA_DIMS, _mla_inputs([3, 0, 7], MLA_DIMS), "bfloat16")
    assert (count.bytes, count.flops, count.source) == (547620, 1629440, "contract")
    assert "547,620" in count.explanation


def test_mla_floor_reads_the_cache():
    # tp8_b32_l8192 with every request at length 4095: 32 * 4096 = 131072 rows * 1152 = 150994944 bytes
    # of cache; + q_nope 131072 + q_pe 65536 + kv_a 36864 + norm weight 1024 + w_kv_b 16*256*512*2 = 4194304
    # + positions 256 + cache_lens 128 + o_heads 131072 = 155555200 bytes: 32.4 us at 4.8 TB/s (the generic
    # count, without the cache, gave about 1 us).
    dims = {"B": 32, "H": 16, "L": 8192}
    contract = load_contract(CONTRACTS / "mla_attention.yaml")
    count = count_roofline(contract, dims, _mla_inputs([4095] * 32, dims), "bfloat16")
    assert count.bytes == 155555200


@pytest.mark.parametrize(
    "op, dims, dtype, want_bytes, want_flops",
    [
        # rmsnorm M=3, N=5: x 15*2 = 30, weight 5*2 = 10, y 30 -> 70; flops 4*15 + 3*3 = 69
        ("rmsnorm", {"M": 3, "N": 5}, "bfloat16", 70, 69),
        # float32: 60 + 20 + 60 = 140
        ("rmsnorm", {"M": 3, "N": 5}, "float32", 140, 69),
        # softmax M=2, N=7: x 14*2 = 28, y 28 -> 56; flops 5*14 = 70
        ("softmax", {"M": 2, "N": 7}, "float16", 56, 70),
        # float32: 56 + 56 = 112
        ("softmax", {"M": 2, "N": 7}, "float32", 112, 70),
        # rope T=3, H=2: x 3*2*64*2 = 768, positions 3*8 = 24, y 768 -> 1560; flops 6*3*2*32 + 3*3*32 = 1152 + 288
        ("rope", {"T": 3, "H": 2}, "bfloat16", 1560, 1440),
        # float32: 1536 + 24 + 1536 = 3096
        ("rope", {"T": 3, "H": 2}, "float32", 3096, 1440),
    ],
)
def test_memory_bound_contracts_hand_worked(op, dims, dtype, want_bytes, want_flops):
    contract = load_contract(CONTRACTS / f"{op}.yaml")
    count = count_roofline(contract, dims, {}, dtype)
    assert (count.bytes, count.flops, count.source) == (want_bytes, want_flops, "contract")


def test_generic_count_without_a_roofline():
    # MLA with B=3, H=2, L=8: the read-only inputs 1536 + 768 + 3456 + 1024 + 524288 + 24 + 12 = 531108 and
    # o_heads 1536 -> 532644; kv_cache (in place) left out; 0 flops.
    contract = load_contract(CONTRACTS / "mla_attention.yaml").model_copy(update={"roofline": None})
    count = count_roofline(contract, MLA_DIMS, _mla_inputs([3, 0, 7], MLA_DIMS), "bfloat16")
    assert (count.bytes, count.flops, count.source) == (532644, 0, "generic")
    assert "kv_cache" in count.explanation
    # rmsnorm M=3, N=5 in float32: x 60 + weight 20 + y 60 = 140.
    rmsnorm = load_contract(CONTRACTS / "rmsnorm.yaml").model_copy(update={"roofline": None})
    assert count_roofline(rmsnorm, {"M": 3, "N": 5}, {}, "float32").bytes == 140


def test_float_values_are_rounded_down(tmp_path):
    # M=3, N=5 bfloat16: nbytes(y) = 30, / 4 = 7.5 -> 7; 0.5 * M = 1.5 -> 1.
    path = write_contract(tmp_path, lambda d: d.update(roofline={"bytes": "nbytes(y) / 4", "flops": "0.5 * M"}))
    count = count_roofline(load_contract(path), {"M": 3, "N": 5}, {}, "bfloat16")
    assert (count.bytes, count.flops) == (7, 1)


def _scope(values) -> Scope:
    specs = {"lens": TensorSpec((3,), "int32", "in")}
    return Scope(dims={"B": 3}, params={"k": 2}, tensors=specs, values={"lens": values})


@pytest.mark.parametrize(
    "expr, real, filled",
    [
        # lens = [3, 0, 7] as a real tensor; every entry 4 as a Filled one.
        ("sum(lens + 1)", 13, 15),  # 4 + 1 + 8; 3 * 5
        ("sum(max(lens, k))", 12, 12),  # 3 + 2 + 7; 3 * 4
        ("sum(min(lens, 1) * k)", 4, 6),  # (1 + 0 + 1) * 2; 3 * 1 * 2
        ("max(lens) - min(lens) + numel(lens) + nbytes(lens)", 22, 15),  # 7 - 0 + 3 + 12; 4 - 4 + 3 + 12
        ("sum(lens) / B ** 2", 1, 1),  # 10 / 9; 12 / 9
        ("-(-B) // 2 + k", 3, 3),
    ],
)
def test_the_language_on_real_and_filled_tensors(expr, real, filled):
    assert evaluate(expr, _scope(torch.tensor([3, 0, 7], dtype=torch.int32))) == real
    assert evaluate(expr, _scope(Filled(4, (3,)))) == filled


# --- bad expressions, refused when the contract loads ------------------------------------------------


@pytest.mark.parametrize(
    "field, expr, says",
    [
        ("bytes", "Q * N", "unknown name 'Q': not a dim (M, N)"),
        ("bytes", "sum(z)", "unknown name 'z'"),
        ("bytes", "nbytes(z)", "nbytes(): no input or output named 'z'"),
        ("flops", "foo(M)", "unknown function 'foo'"),
        ("flops", "__import__(M)", "unknown function '__import__'"),
        ("flops", "M * (N", "cannot parse"),
        ("flops", "M.real", "unsupported syntax"),
        ("bytes", "nbytes(x) / (M - 1)", "division by zero (the divisor is 0) (case cpu.single_element"),
        ("flops", "M - N", "evaluates negative (-496) (case cpu.typical"),
        ("flops", "sum(weight) - 2 * N", "evaluates negative"),
        ("bytes", "x + 1", "evaluates to a tensor of shape (16, 512)"),
        ("bytes", "nbytes(x) # and y", "'#' inside an expression"),
        ("flops", "2 ** 100", "exponent 100 is larger than 64"),
    ],
)
def test_bad_expression_is_refused_at_load(tmp_path, field, expr, says):
    def mutate(data):
        data["roofline"] = {**data["roofline"], field: expr}

    path = write_contract(tmp_path, mutate)
    with pytest.raises(ContractError) as err:
        load_contract(path)
    line = line_of(path, f"  {field}: ")
    assert f"{path}:{line}: roofline.{field}: {says}" in str(err.value)


def test_value_dependent_division_is_refused_at_load(tmp_path):
    # cache_lens is randint [0, L - 1]: at the low end every entry is 0.
    data = yaml.safe_load((CONTRACTS / "mla_attention.yaml").read_text())
    data["roofline"]["flops"] = "sum(1 / cache_lens)"
    path = tmp_path / "mla_attention.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False, width=10_000))
    with pytest.raises(ContractError) as err:
        load_contract(path, require_tolerances=False)
    line = line_of(path, "  flops: ")
    assert f"{path}:{line}: roofline.flops: division by zero (a divisor holds 0) (case cpu.typical" in str(err.value)
    assert "every input at the low end of its range" in str(err.value)


# --- bad values, refused when the judge evaluates on real inputs -------------------------------------


@pytest.mark.parametrize(
    "roofline, cache_lens, says",
    [
        (Roofline(bytes="nbytes(q_nope) // (B - 3)", flops="0"), [3, 0, 7], "roofline.bytes: division by zero"),
        (Roofline(bytes="0", flops="sum(cache_lens) - 11"), [3, 0, 7], "roofline.flops: evaluates negative (-1)"),
        (Roofline(bytes="0", flops="1 / min(cache_lens)"), [3, 0, 7], "roofline.flops: division by zero"),
        (Roofline(bytes="0", flops="cache_lens"), [3, 0, 7], "roofline.flops: evaluates to a tensor"),
    ],
)
def test_bad_value_at_evaluation_is_a_contract_error(roofline, cache_lens, says):
    contract = load_contract(CONTRACTS / "mla_attention.yaml").model_copy(update={"roofline": roofline})
    with pytest.raises(ContractError, match="mla_attention") as err:
        count_roofline(contract, MLA_DIMS, _mla_inputs(cache_lens, MLA_DIMS), "bfloat16")
    assert says in str(err.value)


def test_missing_input_at_evaluation_is_a_contract_error():
    contract = load_contract(CONTRACTS / "mla_attention.yaml")
    with pytest.raises(ContractError, match="roofline.bytes: the case has no dim 'cache_lens' and no input"):
        count_roofline(contract, MLA_DIMS, {}, "bfloat16")
