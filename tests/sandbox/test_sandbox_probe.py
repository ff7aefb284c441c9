"""Choosing a sandbox on a machine with a GPU (ferret/sandbox/launch.py `_works`): beyond Python, a sandbox
must let a Triton kernel compile and run inside it, or it is skipped for the next and the reason is kept
(`sandbox_failures`, the verdict's `sandbox.skipped`). Here the GPU probe is stood in for by a Triton kernel
under the interpreter (no GPU on CI), and by a probe that fails."""

from __future__ import annotations

import pytest

from ferret.sandbox import launch
from ferret.sandbox.launch import BUBBLEWRAP, NAMESPACE

CPU_STAND_IN = """
import os, sys
os.environ["TRITON_INTERPRET"] = "1"
import torch
import triton
import triton.language as tl


@triton.jit
def _add_one(x_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    inside = offsets < n
    tl.store(x_ptr + offsets, tl.load(x_ptr + offsets, mask=inside) + 1, mask=inside)


x = torch.zeros(8)
_add_one[(1,)](x, 8, BLOCK=8)
assert float(x.sum()) == 8.0
open(os.path.join(sys.argv[1], "ok-gpu"), "w").write("ok")
"""


def _confining(kind: str) -> None:
    if not launch._works(kind):
        pytest.skip(f"{kind} cannot confine a process on this machine")


@pytest.mark.parametrize("kind", [BUBBLEWRAP, NAMESPACE])
def test_a_sandbox_that_runs_the_kernel_is_kept(kind, monkeypatch):
    _confining(kind)
    monkeypatch.setattr(launch, "_gpu_present", lambda: True)
    monkeypatch.setattr(launch, "_GPU_PROBE", CPU_STAND_IN)
    monkeypatch.setattr(launch, "_FAILURES", {})
    assert launch._works(kind), launch.sandbox_failures()


@pytest.mark.parametrize("kind", [BUBBLEWRAP, NAMESPACE])
def test_a_sandbox_that_fails_the_kernel_is_skipped_and_says_why(kind, monkeypatch):
    _confining(kind)
    monkeypatch.setattr(launch, "_gpu_present", lambda: True)
    monkeypatch.setattr(launch, "_GPU_PROBE", "import sys\nprint('no CUDA driver in here', file=sys.stderr)\nsys.exit(3)\n")
    monkeypatch.setattr(launch, "_FAILURES", {})
    assert not launch._works(kind)
    assert "GPU probe: exit 3" in launch.sandbox_failures()[kind] and "no CUDA driver" in launch.sandbox_failures()[kind]
