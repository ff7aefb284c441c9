"""The MLA baselines run inside a CUDA graph, as serving engines run decode: no value of a tensor is read on the host
during a call (the attention is bounded by the case's length, the cache's shape, not by `cache_lens.max()`), and the
math is what it was: each request still attends to its own length. The capture itself: tests/gpu/test_graph_timing_gpu.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.overrides import TorchFunctionMode

from ferret.contract.load import load_contract
from ferret.gate.inputs import draw_inputs, output_specs

REPO = Path(__file__).resolve().parents[2]
HOST_READS = {"item", "tolist", "__int__", "__float__", "__bool__", "__index__", "cpu", "numpy", "nonzero"}


class _HostReads(TorchFunctionMode):
    """Every tensor method a call used to take a tensor's value to the host (each waits for the GPU)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in HOST_READS:
            self.seen.append(name)
        return func(*args, **(kwargs or {}))


def _run(op: str, case_name: str, truncate_to_longest: bool = False):
    from importlib import import_module

    contract = load_contract(REPO / "contracts" / f"{op}.yaml")
    case = next(c for c in contract.cases_for("cpu") if c.name == case_name)
    inputs = draw_inputs(contract, case, contract.primary_dtype)
    if truncate_to_longest:  # the attention the baseline did before: over the longest request of the batch only
        inputs["kv_cache"] = inputs["kv_cache"][:, : int(inputs["cache_lens"].max()) + 1].contiguous()
    outputs = {
        n: torch.empty(shape, dtype=dtype) for n, (shape, dtype) in output_specs(contract, case, contract.primary_dtype).items()
    }
    baseline = import_module(f"tasks.{op}.baseline")
    with _HostReads() as reads:
        baseline.run(inputs, outputs, dict(contract.params))
    return reads.seen, outputs, inputs


@pytest.mark.parametrize(("op", "case"), [("mla_attention", "ragged_batch"), ("mla_attention_paged", "typical")])
def test_an_mla_baseline_reads_no_tensor_value_on_the_host(op, case):
    seen, outputs, _ = _run(op, case)
    assert seen == [], f"{op}'s baseline reads tensor values on the host ({seen}): it cannot be captured in a CUDA graph"
    assert all(torch.isfinite(t.float()).all() for t in outputs.values())


def test_bounding_the_attention_by_the_cache_changes_no_answer():
    """Over the whole cache with every request masked to its length, or over the longest request only: the same
    output (rows past a length weigh exactly 0)."""
    _, whole, _ = _run("mla_attention", "ragged_batch")
    _, longest, _ = _run("mla_attention", "ragged_batch", truncate_to_longest=True)
    torch.testing.assert_close(whole["o_heads"].float(), longest["o_heads"].float(), rtol=1e-2, atol=1e-2)
