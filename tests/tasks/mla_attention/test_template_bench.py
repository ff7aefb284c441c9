"""benchmarks/mla_template_bench.py's helpers that only a GPU would reach: reading the compiled attention
kernel's facts out of Triton's caches (layout of Triton 3.x: per device a tuple whose first dicts map keys to
compiled kernels), the point syntax, and the table with skipped and failed rows. The whole script runs on the
CPU with --cpu (see its docstring); that takes a minute, so it is not repeated here."""

from __future__ import annotations

import importlib.util
import types
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("mla_template_bench", REPO / "benchmarks" / "mla_template_bench.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _kernel(ptx: str, regs: int, spills: int):
    return types.SimpleNamespace(asm={"ptx": ptx}, n_regs=regs, n_spills=spills,
                                 metadata=types.SimpleNamespace(shared=147456, num_warps=8))


def test_kernel_facts_read_triton_caches(bench):
    hopper, ampere = _kernel("wgmma.mma_async.sync.aligned", 168, 0), _kernel("mma.sync.aligned.m16n8k16", 255, 40)
    jit = types.SimpleNamespace(device_caches={0: ({"a": hopper, "b": ampere}, {"a": hopper}, "target", "backend", None)})
    facts = bench.kernel_facts(types.SimpleNamespace(_split_kv_attention_kernel=jit))
    assert facts["compiled_variants"] == 2 and facts["wgmma"] is True
    assert [(v["wgmma"], v["mma_sync"], v["n_regs"], v["n_spills"]) for v in facts["variants"]] == [
        (True, False, 168, 0), (False, True, 255, 40)]
    assert bench.kernel_facts(types.SimpleNamespace(_split_kv_attention_kernel=None)) == {"compiled_variants": 0}


def test_points_parse_and_render(bench, tmp_path):
    assert bench.parse_point("head_block=64,num_warps=8,split_policy=waves") == {
        "head_block": 64, "num_warps": 8, "split_policy": "waves"}
    assert bench.parse_point("") == {}
    rendered = bench.render_points([{}, *bench.GPU_POINTS[1:3]], tmp_path)
    assert len(rendered) == 3 and all(path.is_file() for _, path in rendered)
    assert len({approach for approach, _ in bench.render_points(bench.GPU_POINTS, tmp_path)}) == len(bench.GPU_POINTS)
    with pytest.raises(SystemExit, match="head_block=48"):
        bench.render_points([{"head_block": 48}], tmp_path)


def test_markdown_shows_failures_and_skips(bench):
    base = {"shape": "h128_b64_l4096", "floor_us": 80.0}
    rows = [{**base, "impl": "torch.compile(baseline)", "us": 400.0},
            {**base, "impl": "FlashMLA core (attention only)", "flash_mla_core_us": 125.0},
            {**base, "impl": "heads<=64", "us": 200.0, "wgmma": True, "config": {"num_splits": 1},
             "variants": [{"n_regs": 168, "n_spills": 0}]},
            {**base, "impl": "heads<=128", "ok": False, "why": "OutOfResources: shared memory"}]
    table = bench.markdown(rows)
    assert "| h128_b64_l4096 | heads<=64 | 200.0 | 2.00 | 0.40 | 80.0 | yes | 168/0 | 1 |" in table
    assert "OutOfResources: shared memory" in table and "| 125.0 | 3.20 |" in table
    assert "best heads<=64 at 200.0 us" in bench.best_lines(rows)
