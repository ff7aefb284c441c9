"""Every committed CUDA candidate (tasks/*/candidates/cuda_*.py) compiles for the H200 (sm_90a) under NVRTC with the
default flags, without a GPU, and its machine code holds each kernel its launcher names. Their GPU runs through the
gate are in tests/gpu/test_cuda_candidates_gpu.py."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from ferret.backends import cuda, language_of

REPO = Path(__file__).resolve().parents[2]
CANDIDATES = sorted(REPO.glob("tasks/*/candidates/cuda_*.py"))


def test_there_are_cuda_candidates_for_rmsnorm_softmax_and_mla():
    assert {p.parts[-3] for p in CANDIDATES} >= {"rmsnorm", "softmax", "mla_attention"}


def _load(path: Path, name: str, source: str | None = None):
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    if source is None:
        spec.loader.exec_module(module)
    else:
        exec(compile(source, str(path), "exec"), module.__dict__)
    return module


def _kernels(module) -> list[str]:
    return re.findall(r'extern "C" __global__ void (\w+)\(', module.KERNELS.code)


@pytest.mark.parametrize("path", CANDIDATES, ids=lambda p: f"{p.parts[-3]}/{p.name}")
def test_the_candidate_compiles_for_hopper_and_holds_its_kernels(path, monkeypatch):
    monkeypatch.delenv(cuda.FLAGS_ENV, raising=False)
    monkeypatch.delenv(cuda.CACHE_ENV, raising=False)
    assert language_of(path.read_text()) == "cuda"
    module = _load(path, f"cuda_candidate_{path.parts[-3]}")
    cubin = module.KERNELS.cubin(cuda.DEFAULT_ARCH)
    assert cubin[:4] == b"\x7fELF" and _kernels(module)
    assert all(name.encode() in cubin for name in _kernels(module))
    launched = set(re.findall(r'launch\(\s*(?:KERNEL_FOR\[[^]]+\]|"(\w+)")', path.read_text())) - {""}
    assert launched <= set(_kernels(module)), "every kernel launched by name is in the source"


@pytest.mark.parametrize("name", ["theta", "scale", "no_kv_norm", "head_sum"])
def test_the_four_mla_simplifications_in_cuda_are_one_line_each_and_compile(name):
    from tasks.mla_attention.simplifications import CUDA_CANDIDATE_PATH, SIMPLIFICATIONS, cuda_variant_source

    honest = CUDA_CANDIDATE_PATH.read_text()
    source = cuda_variant_source(name)
    changed = [(a, b) for a, b in zip(honest.splitlines(), source.splitlines(), strict=True) if a != b]
    assert changed == [SIMPLIFICATIONS[name][:2]]
    module = _load(CUDA_CANDIDATE_PATH, f"cuda_mla_{name}", source)
    assert all(kernel.encode() in module.KERNELS.cubin(cuda.DEFAULT_ARCH) for kernel in _kernels(module))
