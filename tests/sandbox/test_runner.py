"""The runner's fast calls of a variant (`ferret.sandbox.runner.run_variant`): as many as the variant's job says
(`Budgets.fast_calls`: a traced fresh case one fewer, its traced call compared bitwise with them too)."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from ferret import wire
from ferret.contract.model import Budgets
from ferret.sandbox.runner import run_variant


def _job(tmp_path, variant_repeats: int | None) -> tuple[wire.VariantJob, wire.CandidateJob]:
    save_file({"x": torch.arange(8, dtype=torch.float32)}, str(tmp_path / "in.safetensors"))
    variant = wire.VariantJob(
        id="fresh1@float32",
        inputs_file=str(tmp_path / "in.safetensors"),
        outputs={"y": ([8], "float32")},
        inout=[],
        in_only=["x"],
        repeats=variant_repeats,
    )
    job = wire.CandidateJob(
        candidate="",
        entry="run",
        device="cpu",
        params={},
        repeats=3,
        stress_iterations=1,
        stress_variant=None,
        variants=[variant],
        result_dir=str(tmp_path),
    )
    return variant, job


@pytest.mark.parametrize(("variant_repeats", "fast_calls"), [(None, 3), (2, 2)])
def test_a_variant_makes_the_fast_calls_its_job_gives_it_and_one_traced(tmp_path, variant_repeats, fast_calls):
    variant, job = _job(tmp_path, variant_repeats)
    traced = []

    def doubling(inputs, outputs, params, trace=None):
        traced.append(trace is not None)
        outputs["y"].copy_(inputs["x"] * 2)

    tensors, status = run_variant(doubling, variant, job, "cpu")
    assert status.ok, status.message
    assert traced.count(False) == fast_calls and traced.count(True) == 1
    assert {k for k in tensors if k.startswith("fast")} == {wire.fast_key(r, "y") for r in range(fast_calls)}


def test_a_traced_fresh_case_makes_one_fast_call_fewer_and_never_fewer_than_two():
    assert Budgets(determinism_repeats=3).fast_calls("fresh_cases", traced=True) == 2
    assert Budgets(determinism_repeats=2).fast_calls("fresh_cases", traced=True) == 2
    assert Budgets(determinism_repeats=3).fast_calls("fresh_cases", traced=False) == 3
    assert Budgets(determinism_repeats=4).fast_calls("correctness", traced=True) == 4
