"""A CUDA candidate whose source NVRTC refuses fails its variant as `compile_error`, with the compiler's log as the
message: a verdict, not a crash."""

from __future__ import annotations

import sys

import torch
from safetensors.torch import save_file

from ferret import wire
from ferret.backends import cuda
from ferret.sandbox import runner
from ferret.sandbox.watch import HarnessGuard, LaunchRecorder

BROKEN = 'extern "C" __global__ void k(float* y) { y[0] = 1.f }'


def test_a_refused_cuda_source_is_a_compile_error_carrying_the_log(tmp_path, monkeypatch):
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    # the recorder below wraps Triton's launch entry points: put back at teardown, for the tests after this one
    for cls in (JITFunction, InterpretedFunction):
        monkeypatch.setattr(cls, "run", cls.run)
    monkeypatch.setattr(cuda.Source, "launch", cuda.Source.launch)
    save_file({"x": torch.ones(2, 4)}, str(tmp_path / "inputs.safetensors"))
    variant = wire.VariantJob(
        id="typical@float32",
        inputs_file=str(tmp_path / "inputs.safetensors"),
        outputs={"y": ([2, 4], "float32")},
        inout=[],
        in_only=["x"],
    )
    job = wire.CandidateJob(
        candidate="candidate.py",
        entry="run",
        device="cpu",
        params={},
        repeats=1,
        stress_iterations=0,
        stress_variant=None,
        variants=[variant],
        result_dir=str(tmp_path),
    )

    def run(inputs, outputs, params, trace=None):
        cuda.compile_cubin(BROKEN, ["-std=c++17"], "sm_90")  # what Source.launch does first

    launches = LaunchRecorder()
    status = runner._run_one(run, variant, job, tmp_path, HarnessGuard(sys.modules[runner.__name__], launches), launches)
    assert not status.ok and status.kind == wire.FailureKind.COMPILE_ERROR
    assert 'error: expected a ";"' in status.message and "NVRTC refused" in status.message
