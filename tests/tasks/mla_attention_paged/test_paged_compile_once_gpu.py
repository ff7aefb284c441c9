"""On the GPU: the paged template's point with per-request splits and the batch-block merge (starts[2], the default of
2026-12-01..02; the default now keys its streamed merge on rows per program and split count) compiles each of its
kernels once over every GPU case of its contract and three odd shapes like the fresh cases a check draws (traced and
untraced), except the kernels whose rows are a block of requests (16 rows up to 16 requests, 64 above: twice at
most) and the attention kernel, sized by the heads (once per head block; tasks/mla_attention_paged/templates). Its
checks on the H200 spent 23.6-26.6 s of a warm check in the runner's first calls, compiling per shape;
the contiguous candidate's twin is
tests/tasks/mla_attention/test_compile_once_gpu.py. Run with `pytest -m gpu`."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ferret.contract.load import load_contract
from ferret.gate.inputs import draw_inputs, output_specs
from ferret.roles.offline import TemplateSearchOptimizer
from tasks.variants import import_file

REPO = Path(__file__).resolve().parents[3]
CONTRACT = REPO / "contracts" / "mla_attention_paged.yaml"
TEMPLATES = REPO / "tasks" / "mla_attention_paged" / "templates"
# Shapes like the fresh cases of the H200's checks (B, H, pages per request): ones, odd sizes, no multiple of 16.
FRESH_LIKE = [{"B": 17, "H": 61, "P": 38}, {"B": 1, "H": 1, "P": 1}, {"B": 11, "H": 7, "P": 95}]
BATCH_BLOCKED = {"_q_prepare_kernel", "_combine_unabsorb_kernel", "_trace_o_latent_kernel"}
# Kernel 3 keeps min(HEAD_BLOCK, heads rounded up to a power of two, at least 16) heads per program: at the default
# point (64 heads) the cases' 128 and 61 heads build blocks of 64, their 16, 7 and 1 heads blocks of 16.
HEAD_BLOCKED = {"_paged_attention_kernel": 2}


@pytest.mark.gpu
def test_the_paged_candidate_compiles_each_kernel_once_over_every_gpu_case_and_odd_shapes(tmp_path):
    optimizer = TemplateSearchOptimizer(TEMPLATES)
    space = optimizer.space
    path = tmp_path / "paged_batch_blocks.py"
    path.write_text(optimizer.render(space.canonical({**space.default, **space.starts[2]})))
    module = import_file(path, "_mla_paged_compile_once_candidate")
    contract = load_contract(CONTRACT)
    cases = contract.cases_for("gpu")
    cases += [cases[0].model_copy(update={"name": f"odd{i}", "dims": dims, "edits": []}) for i, dims in enumerate(FRESH_LIKE)]
    for case in cases:
        inputs = {k: v.cuda() for k, v in draw_inputs(contract, case, "bfloat16").items()}
        outputs = {n: torch.empty(s, dtype=d, device="cuda") for n, (s, d) in output_specs(contract, case, "bfloat16").items()}
        module.run(inputs, outputs, dict(contract.params))
        module.run(inputs, outputs, dict(contract.params), trace={})
    torch.cuda.synchronize()
    from benchmarks import mla as bench

    counts = {n: len(bench.compiled_kernels(f)) for n, f in vars(module).items() if n.endswith("_kernel") and hasattr(f, "run")}
    assert len(counts) >= 7 and BATCH_BLOCKED | set(HEAD_BLOCKED) <= set(counts), counts  # fast path's 4, trace's 3
    once = set(counts) - BATCH_BLOCKED - set(HEAD_BLOCKED)
    assert {n: counts[n] for n in once} == dict.fromkeys(once, 1)
    assert all(counts[n] <= 2 for n in BATCH_BLOCKED), counts
    assert all(counts[n] <= most for n, most in HEAD_BLOCKED.items()), counts
