"""`ferret export`: only a file that passes the current gate is packaged; the package registers ferret::<op> with
torch.library, checks every call before any launch, traces under torch.compile as one node, and is stamped."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from ferret.cli.main import app
from ferret.export.signature import op_arguments, schema
from ferret.gate.trust import recorded_pass

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from export_kit import CANDIDATES, CONTRACTS  # noqa: E402
from ferret_testkit import write_contract  # noqa: E402

RMSNORM = CONTRACTS / "rmsnorm.yaml"
EPS = 1e-6
# On a GPU machine the kernel runs compiled on the GPU; without one, under the interpreter on the CPU.
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"

# Writes the input: no kernel, no RMS. A file that fails the gate on its math.
COPY_INPUT = """
def run(inputs, outputs, params, trace=None):
    outputs["y"].copy_(inputs["x"])
"""


def _rms_inputs(m: int = 5, n: int = 300, dtype=torch.bfloat16):
    generator = torch.Generator().manual_seed(7)
    x = torch.randn(m, n, generator=generator).to(DEVICE, dtype)
    weight = (torch.rand(n, generator=generator) + 0.5).to(DEVICE, dtype)
    return x, weight


def _rms_float64(x, weight):
    x64 = x.double()
    return x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + EPS) * weight.double()


def test_the_package_is_stamped_with_the_gate_the_file_and_the_cpu_profile(rmsnorm_package):
    record, package = rmsnorm_package
    manifest = json.loads((record.folder / "manifest.json").read_text())
    kernel_bytes = (record.folder / "kernel.py").read_bytes()
    assert kernel_bytes == CANDIDATES["rmsnorm"].read_bytes()
    assert manifest["candidate_sha256"] == hashlib.sha256(kernel_bytes).hexdigest()
    # The pass on record for this gate and file (a later check of the same file may have recorded it again).
    on_record = recorded_pass(manifest["gate_hash"], manifest["candidate_sha256"])
    assert on_record is not None
    assert {k: v for k, v in on_record.items() if k != "started_at"} == {
        k: v for k, v in manifest["pass_recorded"].items() if k != "started_at"
    }
    assert manifest["profile"] == "cpu" and "CPU profile only" in manifest["verdict_note"]
    assert "speed was not measured" in package.__doc__
    assert manifest["op_name"] == package.OP_NAME == "ferret::rmsnorm"
    assert manifest["params"] == {"eps": EPS}


def test_the_schema_comes_from_the_contract_and_declares_the_output_mutated(rmsnorm_package):
    _, package = rmsnorm_package
    registered = str(torch.ops.ferret.rmsnorm.default._schema)
    assert registered == "ferret::rmsnorm(Tensor x, Tensor weight, Tensor(a0!) y) -> ()"
    assert registered == package.OP_NAME + package.SCHEMA


@pytest.mark.quick
def test_a_contract_with_an_inout_input_declares_it_mutated_beside_the_output():
    from ferret.contract.load import load_contract

    contract = load_contract(CONTRACTS / "mla_attention_paged.yaml")
    assert schema(op_arguments(contract)) == (
        "(Tensor q_nope, Tensor q_pe, Tensor kv_a, Tensor kv_a_norm_weight, Tensor w_kv_b, Tensor positions, "
        "Tensor cache_lens, Tensor block_table, Tensor(a0!) kv_cache, Tensor(a1!) o_heads) -> ()"
    )


def test_the_op_computes_what_the_judged_file_computes(rmsnorm_package):
    _, package = rmsnorm_package
    x, weight = _rms_inputs()
    y = torch.full_like(x, float("nan"))
    torch.ops.ferret.rmsnorm(x, weight, y)
    direct = torch.full_like(x, float("nan"))
    package._kernel.run({"x": x, "weight": weight}, {"y": direct}, {"eps": EPS})
    assert torch.equal(y, direct)
    assert torch.equal(package.rmsnorm(x, weight), direct)
    assert (y.double() - _rms_float64(x, weight)).abs().max() < 0.02 * _rms_float64(x, weight).abs().max()


@pytest.mark.parametrize(
    "case, message",
    [
        ("float64", "x is torch.float64; the gate judged bfloat16, float16, float32"),
        ("weight_dtype", "weight is torch.float32, expected torch.bfloat16"),
        ("weight_shape", "weight has shape (299,), expected ['N'] = (300,) (M = 5, N = 300)"),
        ("y_rank", "y has 1 dims (1500,), expected ['M', 'N']"),
        ("strided", "x is not contiguous"),
        ("empty", "M = 0 (from x); the gate judged M >= 1"),
    ],
)
def test_a_call_that_does_not_fit_the_contract_is_refused_before_any_launch(rmsnorm_package, case, message):
    _, package = rmsnorm_package
    x, weight = _rms_inputs()
    y = torch.full_like(x, float("nan"))
    if case == "float64":
        x, weight, y = x.double(), weight.double(), y.double()
    elif case == "weight_dtype":
        weight = weight.float()
    elif case == "weight_shape":
        weight = weight[:299]
    elif case == "y_rank":
        y = y.reshape(-1)
    elif case == "strided":
        x = torch.cat([x, x], dim=1)[:, ::2]
    elif case == "empty":
        x, y = x[:0], y[:0]
    with pytest.raises(package.BoundaryError, match="^ferret::rmsnorm: ") as raised:
        torch.ops.ferret.rmsnorm(x, weight, y)
    assert message in str(raised.value)
    assert torch.isnan(y).all()  # nothing was written: the kernel never ran


def test_torch_compile_keeps_the_op_as_one_node_without_graph_breaks(rmsnorm_package):
    _, package = rmsnorm_package
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    def layer(x, weight):
        return package.rmsnorm(x * 2.0, weight) + 1.0

    x, weight = _rms_inputs()
    torch._dynamo.reset()
    compiled = torch.compile(layer, backend=backend, fullgraph=True)
    assert torch.equal(compiled(x, weight), layer(x, weight))
    assert len(graphs) == 1
    calls = [n.target for n in graphs[0].graph.nodes if n.op == "call_function" and "ferret" in str(n.target)]
    assert calls == [torch.ops.ferret.rmsnorm]  # one node, the op itself: dynamo never traced into the kernel


def test_the_fake_implementation_checks_shapes_while_tracing(rmsnorm_package):
    from torch._subclasses.fake_tensor import FakeTensorMode

    _, package = rmsnorm_package
    with FakeTensorMode():
        x = torch.empty(4, 8, dtype=torch.bfloat16)
        torch.ops.ferret.rmsnorm(x, torch.empty(8, dtype=torch.bfloat16), torch.empty(4, 8, dtype=torch.bfloat16))
        with pytest.raises(package.BoundaryError, match="weight has shape"):
            torch.ops.ferret.rmsnorm(x, torch.empty(9, dtype=torch.bfloat16), torch.empty(4, 8, dtype=torch.bfloat16))


def test_a_kernel_changed_after_export_is_refused_at_import(rmsnorm_package, tmp_path):
    record, _ = rmsnorm_package
    copy = tmp_path / "changed_rmsnorm"
    shutil.copytree(record.folder, copy)
    (copy / "kernel.py").write_text((copy / "kernel.py").read_text() + "\n# edited\n")
    spec = importlib.util.spec_from_file_location("changed_rmsnorm", copy / "__init__.py", submodule_search_locations=[str(copy)])
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["changed_rmsnorm"] = module
    try:
        with pytest.raises(ImportError, match="the kernel was changed after export"):
            spec.loader.exec_module(module)
    finally:
        del sys.modules["changed_rmsnorm"]


def test_a_pass_on_record_is_used_and_a_changed_file_is_checked_again(rmsnorm_package, export_gates_dir, tmp_path):
    record, _ = rmsnorm_package
    runner = CliRunner()
    again = runner.invoke(
        app,
        [
            "export",
            str(CANDIDATES["rmsnorm"]),
            "--contract",
            str(RMSNORM),
            "--out",
            str(tmp_path / "again"),
            "--gates-dir",
            str(export_gates_dir),
            "--profile",
            "cpu",
        ],
    )
    assert again.exit_code == 0, again.output
    assert json.loads((tmp_path / "again" / "ferret_rmsnorm" / "manifest.json").read_text())["checked_at_export"] is False
    edited = tmp_path / "triton_rmsnorm.py"
    edited.write_text(CANDIDATES["rmsnorm"].read_text() + "\n# a comment: new bytes, never judged\n")
    result = runner.invoke(
        app,
        [
            "export",
            str(edited),
            "--contract",
            str(RMSNORM),
            "--out",
            str(tmp_path / "edited"),
            "--gates-dir",
            str(export_gates_dir),
            "--profile",
            "cpu",
        ],
    )
    assert result.exit_code == 0, result.output
    manifest = json.loads((tmp_path / "edited" / "ferret_rmsnorm" / "manifest.json").read_text())
    assert manifest["checked_at_export"] is True and manifest["gate_hash"] == record.manifest.gate_hash
    assert manifest["candidate_sha256"] == hashlib.sha256(edited.read_bytes()).hexdigest()


def test_a_failing_candidate_is_exit_2_naming_why_and_nothing_is_written(export_gates_dir, tmp_path):
    bad = tmp_path / "copy_input.py"
    bad.write_text(COPY_INPUT)
    result = CliRunner().invoke(
        app,
        [
            "export",
            str(bad),
            "--contract",
            str(RMSNORM),
            "--out",
            str(tmp_path / "out"),
            "--gates-dir",
            str(export_gates_dir),
            "--profile",
            "cpu",
        ],
    )
    assert result.exit_code == 2, result.output
    said = " ".join(result.stderr.split())
    assert "copy_input.py fails gate" in said and "first failing stage" in said and "export refused" in said
    assert not (tmp_path / "out").exists()
    assert (
        recorded_pass(result.stderr.split("fails gate ")[1].split(":")[0], hashlib.sha256(bad.read_bytes()).hexdigest()) is None
    )


@pytest.mark.quick
def test_an_unknown_candidate_is_exit_2(tmp_path):
    result = CliRunner().invoke(app, ["export", str(tmp_path / "nowhere.py"), "--contract", str(RMSNORM), "--out", str(tmp_path)])
    assert result.exit_code == 2 and "nowhere.py: no such candidate file" in result.stderr


@pytest.mark.quick
def test_a_contract_whose_dims_no_call_can_give_is_exit_2(tmp_path):
    def hide_n(data):
        for entry in data["inputs"] + data["outputs"]:
            entry["shape"] = [("N * 1" if e == "N" else e) for e in entry["shape"]]

    contract = write_contract(tmp_path, hide_n)
    result = CliRunner().invoke(
        app,
        ["export", str(CANDIDATES["rmsnorm"]), "--contract", str(contract), "--out", str(tmp_path / "out"), "--profile", "cpu"],
    )
    assert result.exit_code == 2, result.output
    assert "dim N is named alone by no input's or output's shape" in " ".join(result.stderr.split())


def test_a_language_the_contract_refuses_is_exit_2(tmp_path):
    cuda = CANDIDATES["rmsnorm"].with_name("cuda_rmsnorm.py")
    result = CliRunner().invoke(
        app, ["export", str(cuda), "--contract", str(RMSNORM), "--out", str(tmp_path), "--profile", "cpu"]
    )
    assert result.exit_code == 2 and "is a cuda candidate" in " ".join(result.stderr.split())


@pytest.mark.quick
def test_a_record_of_passes_that_is_not_an_object_is_tampered_not_empty(tmp_path, monkeypatch):
    """Read as empty, every export would re-run its check, and the next pass would overwrite the rest."""
    from ferret.errors import GateTampered
    from ferret.gate.trust import PASSES_FILE, record_pass

    monkeypatch.setenv("FERRET_TRUST_DIR", str(tmp_path))
    record_pass("g" * 64, "c" * 64, {"profile": "cpu"})
    assert recorded_pass("g" * 64, "c" * 64) == {"profile": "cpu"} and recorded_pass("g" * 64, "d" * 64) is None
    (tmp_path / PASSES_FILE).write_text("[1, 2]")
    with pytest.raises(GateTampered, match="is not a JSON object"):
        recorded_pass("g" * 64, "c" * 64)
