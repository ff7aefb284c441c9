"""The runner's stress run (`ferret.sandbox.runner.run_stress`): the same call many times, each output compared
bit for bit with the first call's on the device (NaN equal to NaN, -0.0 not equal to 0.0)."""

from __future__ import annotations

import torch
from safetensors.torch import save_file

from ferret import wire
from ferret.sandbox.runner import run_stress


def _job(tmp_path, iterations: int = 6) -> tuple[wire.VariantJob, wire.CandidateJob]:
    save_file({"x": torch.arange(8, dtype=torch.float32)}, str(tmp_path / "in.safetensors"))
    variant = wire.VariantJob(
        id="case@float32", inputs_file=str(tmp_path / "in.safetensors"), outputs={"y": ([8], "bfloat16")}, inout=[], in_only=["x"]
    )
    job = wire.CandidateJob(
        candidate="",
        entry="run",
        device="cpu",
        params={},
        repeats=1,
        stress_iterations=iterations,
        stress_variant=0,
        variants=[variant],
        result_dir=str(tmp_path),
    )
    return variant, job


def test_the_same_bits_every_call_is_no_drift_nan_included(tmp_path):
    variant, job = _job(tmp_path)

    def steady(inputs, outputs, params):
        outputs["y"].copy_(inputs["x"] / 0.0 - inputs["x"])  # nan at 0, inf elsewhere: the same every call

    result = run_stress(steady, variant, job, "cpu")
    assert (result.iterations, result.outputs_differing_from_first, result.variant) == (6, 0, "case@float32")


def test_every_call_that_differs_from_the_first_is_counted(tmp_path):
    variant, job = _job(tmp_path)
    calls = []

    def drifting(inputs, outputs, params):
        calls.append(1)
        sign = -1.0 if len(calls) % 2 == 0 else 1.0
        outputs["y"].copy_(inputs["x"] * 0.0 * sign)  # -0.0 on even calls: equal as numbers, not as bits

    assert run_stress(drifting, variant, job, "cpu").outputs_differing_from_first == 3
