"""On the GPU: the template's point with per-request splits and the batch-block merge (starts[2], the default of
2026-12-01..02, `specialize: none`) compiles each of its kernels once over every GPU case of the contract, traced
and untraced, except those sized by the batch (two block sizes: twice at most) and the attention kernel, sized by
the heads (once per head block), while the `specialize: shape` point compiles more. (The default now, balanced runs
with the streamed merge, also keys its merge, un-absorption and attention kernels on the rows per merge program and
the split count: finite sets, but not once per kernel; this test does not bound them.) A gate check runs a dozen
shapes, fresh ones included, and every compilation there costs a second or two of its time budget. Run with `pytest
-m gpu`."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

from ferret.contract.load import load_contract
from ferret.gate.inputs import draw_inputs, output_specs
from ferret.roles.offline import TemplateSearchOptimizer

REPO = Path(__file__).resolve().parents[3]
CONTRACT = REPO / "contracts" / "mla_attention.yaml"


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _compilations(module) -> dict[str, int]:
    """Compiled kernels of each @triton.jit kernel of `module` (the bench's reading of Triton's caches)."""
    from benchmarks import mla as bench

    kernels = {n: f for n, f in vars(module).items() if n.endswith("_kernel") and hasattr(f, "run")}
    return {name: len(bench.compiled_kernels(fn)) for name, fn in kernels.items()}


def _run_every_gpu_case(module) -> None:
    contract = load_contract(CONTRACT)
    for case in contract.cases_for("gpu"):
        inputs = {k: v.cuda() for k, v in draw_inputs(contract, case, "bfloat16").items()}
        outputs = {n: torch.empty(s, dtype=d, device="cuda") for n, (s, d) in output_specs(contract, case, "bfloat16").items()}
        module.run(inputs, outputs, dict(contract.params))
        module.run(inputs, outputs, dict(contract.params), trace={})
    torch.cuda.synchronize()


# Kernels whose rows are a block of requests: 16 rows up to 16 requests, the point's batch block above.
BATCH_BLOCKED = {"_q_prepare_kernel", "_combine_unabsorb_kernel", "_trace_o_latent_kernel"}
# Kernel 3 keeps min(HEAD_BLOCK, heads rounded up to a power of two, at least 16) heads per program: the
# contract's GPU cases have 128, 32 and 16 heads, so the default point (64 heads) builds blocks of 64, 32 and 16.
HEAD_BLOCKED = {"_split_kv_attention_kernel": 3}


def _batch_block_point(optimizer: TemplateSearchOptimizer, **override) -> dict:
    space = optimizer.space
    return space.canonical({**space.default, **space.starts[2], **override})


@pytest.mark.gpu
def test_the_batch_block_point_compiles_each_kernel_once_over_every_gpu_case(tmp_path):
    optimizer = TemplateSearchOptimizer(REPO / "tasks" / "mla_attention" / "templates")
    path = tmp_path / "batch_blocks.py"
    path.write_text(optimizer.render(_batch_block_point(optimizer)))
    module = _load(path, "_mla_compile_once_candidate")
    _run_every_gpu_case(module)
    counts = _compilations(module)
    assert len(counts) >= 6 and BATCH_BLOCKED | set(HEAD_BLOCKED) <= set(counts), counts  # fast path's and trace's
    once = set(counts) - BATCH_BLOCKED - set(HEAD_BLOCKED)
    assert {n: counts[n] for n in once} == dict.fromkeys(once, 1)
    assert all(counts[n] <= 2 for n in BATCH_BLOCKED), counts
    assert all(counts[n] <= most for n, most in HEAD_BLOCKED.items()), counts


@pytest.mark.gpu
def test_the_per_shape_point_compiles_again_for_new_shapes(tmp_path):
    """The control: the same kernels at `specialize: shape` compile more over the same cases, so the counts above
    would see a kernel that still follows the shape."""
    optimizer = TemplateSearchOptimizer(REPO / "tasks" / "mla_attention" / "templates")
    path = tmp_path / "per_shape.py"
    path.write_text(optimizer.render(_batch_block_point(optimizer, specialize="shape")))
    module = _load(path, "_mla_compile_per_shape")
    _run_every_gpu_case(module)
    counts = _compilations(module)
    more = [n for n, c in counts.items() if c > HEAD_BLOCKED.get(n, 2 if n in BATCH_BLOCKED else 1)]
    assert more, counts
