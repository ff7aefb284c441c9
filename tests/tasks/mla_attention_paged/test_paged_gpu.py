"""On the GPU: the honest candidate, the baseline and the template's overlapped launches (the default point with
launch_overlap=pdl, and pdl_all, whose Triton kernel 3 waits on the grid dependency only on a GPU) on the paged
contract's GPU cases (128 heads B=64 L=4096, 16 heads B=32 L=8192; shuffled pages, a reversed request, a new-page
request, unowned pages NaN), their inputs drawn as the judge draws them, against the float64 reference, within the
contract's tolerances; their times are printed (`pytest -m gpu`)."""

from __future__ import annotations

import functools
import importlib
from pathlib import Path

import pytest
import torch
import yaml

from ferret.contract.load import load_contract
from ferret.gate.inputs import draw_inputs
from tasks.mla_attention_paged import reference as ref
from tasks.mla_attention_paged.layout import new_token_slots

CONTRACT = Path(__file__).resolve().parents[3] / "contracts" / "mla_attention_paged.yaml"
TOLERANCES = CONTRACT.with_name("mla_attention_paged.tolerances.yaml")
GPU_CASES = ["tp1_b64_l4096", "tp8_b32_l8192"]
IMPLEMENTATIONS = {
    "baseline": "tasks.mla_attention_paged.baseline",
    "triton_mla_paged": "tasks.mla_attention_paged.candidates.triton_mla_paged",
}
# Points of the paged template rendered for the test: the default with its streamed side kernels launched as
# programmatic dependents (pdl), and kernel 3 too (pdl_all).
RENDERED = {"paged_pdl": {"launch_overlap": "pdl"}, "paged_pdl_all": {"launch_overlap": "pdl_all"}}
TEMPLATES = CONTRACT.parents[1] / "tasks" / "mla_attention_paged" / "templates"


def _inputs(name: str, device: str) -> dict[str, torch.Tensor]:
    contract = load_contract(CONTRACT)
    case = next(c for c in contract.cases_for("gpu") + contract.cases_for("cpu") if c.name == name)
    return {k: v.to(device) for k, v in draw_inputs(contract, case, "bfloat16").items()}


def _errors(actual: torch.Tensor, expected: torch.Tensor) -> tuple[float, float]:
    actual, expected = actual.double(), expected.double()
    assert torch.isfinite(actual).all()
    diff = actual - expected
    return float(diff.norm() / expected.norm()), float(diff.abs().max() / expected.abs().max())


@functools.cache
def _module(impl: str, workdir: Path):
    """A committed implementation's module, or a RENDERED point of the template written into `workdir` and loaded
    (once a test: the test and its check share the module)."""
    if impl in IMPLEMENTATIONS:
        return importlib.import_module(IMPLEMENTATIONS[impl])
    from ferret.roles.offline import TemplateSearchOptimizer
    from tasks.variants import import_file

    optimizer = TemplateSearchOptimizer(TEMPLATES)
    path = workdir / f"{impl}.py"
    path.write_text(optimizer.render(optimizer.space.canonical({**optimizer.space.default, **RENDERED[impl]})))
    return import_file(path, f"mla_{impl}")


def _check_case(impl: str, name: str, device: str, workdir: Path):
    """Run `impl` on the case's layout; assert o_heads and the appended rows within the contract's tolerances.
    Returns (a function running one more step, o_heads rel_l2)."""
    table = yaml.safe_load(TOLERANCES.read_text())["by_dtype"]["bfloat16"]
    module = _module(impl, workdir)
    inputs = _inputs(name, device)
    golden = ref.reference(inputs, ref.DEEPSEEK_V3_PARAMS)
    batch, heads, _ = inputs["q_nope"].shape
    after = {k: v.clone() for k, v in inputs.items()}
    out = {"o_heads": torch.full((batch, heads, 128), float("nan"), dtype=torch.bfloat16, device=device)}
    module.run(after, out, ref.DEEPSEEK_V3_PARAMS)
    rel_l2, peak = _errors(out["o_heads"], golden["o_heads"])
    assert rel_l2 <= table["o_heads"]["rel_l2"] and peak <= table["o_heads"]["max_abs_rel_peak"], (rel_l2, peak)
    pages, rows = new_token_slots(inputs["block_table"], inputs["cache_lens"])
    changed = torch.zeros(inputs["kv_cache"].shape[:2], dtype=torch.bool, device=device)
    changed[pages, rows] = True
    unchanged = after["kv_cache"][~changed].view(torch.int16), inputs["kv_cache"][~changed].view(torch.int16)
    assert torch.equal(*unchanged)  # bitwise, so the NaN pages compare too
    assert _errors(after["kv_cache"][changed], golden["kv_cache"][changed])[0] <= table["c_kv"]["rel_l2"]
    return (lambda: module.run(after, out, ref.DEEPSEEK_V3_PARAMS)), rel_l2


@pytest.mark.parametrize("impl", ["triton_mla_paged", "paged_pdl_all"])
def test_the_gpu_check_itself_on_a_cpu_layout(impl, tmp_path):
    """The same check on the contract's `typical` CPU layout (Triton's interpreter), so that it is known to
    work before a GPU runs it: the candidate, and a rendered point (pdl_all, its grid-dependency waits skipped here)."""
    _check_case(impl, "typical", "cpu", tmp_path)


@pytest.mark.gpu
@pytest.mark.parametrize("name", GPU_CASES)
@pytest.mark.parametrize("impl", [*IMPLEMENTATIONS, *RENDERED])
def test_gpu_case_within_tolerance(impl, name, tmp_path):
    import triton

    if impl in RENDERED:
        if torch.cuda.get_device_capability()[0] < 9:
            pytest.skip("programmatic launches need a Hopper GPU or later")
        # the point's kernels wait on the grid dependency (GDC) only where run() launches them programmatically
        assert _module(impl, tmp_path)._programmatic_launches(torch.device("cuda"))
    step, rel_l2 = _check_case(impl, name, "cuda", tmp_path)
    ms = triton.testing.do_bench(step, warmup=25, rep=200)
    assert isinstance(ms, float)
    print(f"{impl} {name}: {ms * 1e3:.1f} us, o_heads rel_l2 {rel_l2:.2e}")
