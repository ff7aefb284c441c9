"""Every committed CUDA candidate (tasks/*/candidates/cuda_*.py) compiles for the H200 (sm_90) under NVRTC with the
default flags, without a GPU, and its machine code holds each kernel its launcher names. Their GPU runs through the
gate are in tests/gpu/test_cuda_candidates_gpu.py."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from ferret.backends import cuda, language_of

REPO = Path(__file__).resolve().parents[2]
CANDIDATES = sorted(REPO.glob("tasks/*/candidates/cuda_*.py"))


def test_there_are_cuda_candidates_for_rmsnorm_and_softmax():
    assert {p.parts[-3] for p in CANDIDATES} >= {"rmsnorm", "softmax"}


@pytest.mark.parametrize("path", CANDIDATES, ids=lambda p: f"{p.parts[-3]}/{p.name}")
def test_the_candidate_compiles_for_hopper_and_holds_its_kernels(path, monkeypatch):
    monkeypatch.delenv(cuda.FLAGS_ENV, raising=False)
    monkeypatch.delenv(cuda.CACHE_ENV, raising=False)
    assert language_of(path.read_text()) == "cuda"
    spec = importlib.util.spec_from_file_location(f"cuda_candidate_{path.parts[-3]}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    cubin = module.KERNELS.cubin("sm_90")
    assert cubin[:4] == b"\x7fELF"
    assert all(name.encode() in cubin for name in module.KERNEL_FOR.values())
