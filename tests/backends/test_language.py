"""A candidate's language is read from its imports: CUDA C++ when it imports the judge's CUDA backend."""

from __future__ import annotations

import pytest

from ferret.backends import language_of
from ferret.contract.model import Backend


@pytest.mark.parametrize(
    ("source", "language"),
    [
        ("from ferret.backends import cuda\n", "cuda"),
        ("import ferret.backends.cuda as cu\n", "cuda"),
        ("from ferret.backends.cuda import Source\n", "cuda"),
        ("import triton\nimport triton.language as tl\n", "triton"),
        ("from ferret.backends import language_of\n", "triton"),
        ("def run(:\n", "triton"),
    ],
)
def test_the_language_follows_the_imports(source, language):
    assert language_of(source) == language


@pytest.mark.quick
def test_a_contract_allows_its_language_and_those_it_names():
    assert Backend().allows("triton") and not Backend().allows("cuda")
    both = Backend(allowed_languages=["cuda"])
    assert both.allows("triton") and both.allows("cuda")
    assert Backend(language="cuda").allows("cuda") and not Backend(language="cuda").allows("triton")


def test_a_cuda_candidate_on_a_machine_without_cupy_is_told_what_to_install(monkeypatch, tmp_path):
    """The judge's refusal (exit 2 from `ferret check`) comes before any process starts, naming what to install."""
    import sys
    import types

    from ferret.errors import UsageError
    from ferret.gate.judge import require_language

    candidate = tmp_path / "cuda_candidate.py"
    candidate.write_text("from ferret.backends import cuda\n")
    task = types.SimpleNamespace(
        contract=types.SimpleNamespace(backend=Backend(allowed_languages=["cuda"])), path=tmp_path / "op.yaml"
    )
    monkeypatch.setitem(sys.modules, "cupy_backends.cuda.libs", None)
    monkeypatch.delitem(sys.modules, "cupy_backends.cuda.libs.nvrtc", raising=False)
    with pytest.raises(UsageError, match=r"cannot compile it: CUDA candidates need CuPy and NVRTC: pip install"):
        require_language(task, "cuda", "gpu", candidate)  # type: ignore[arg-type]
    monkeypatch.undo()
    require_language(task, "cuda", "gpu", candidate)  # type: ignore[arg-type]  # with CuPy and NVRTC: accepted


def test_a_cuda_only_contract_refuses_a_triton_candidate_saying_why(tmp_path):
    import types

    from ferret.errors import UsageError
    from ferret.gate.judge import require_language

    candidate = tmp_path / "triton_candidate.py"
    candidate.write_text("import triton\n")
    task = types.SimpleNamespace(contract=types.SimpleNamespace(backend=Backend(language="cuda")), path=tmp_path / "op.yaml")
    with pytest.raises(
        UsageError,
        match=r"is a triton candidate \(it does not import ferret.backends.cuda\), but "
        r".*op.yaml allows cuda only",
    ):
        require_language(task, "cuda", "gpu", candidate)  # type: ignore[arg-type]


def test_the_optimizer_is_told_the_languages_this_profile_can_judge(monkeypatch):
    """The contract's languages, CUDA only on the GPU profile where NVRTC loads: the CPU profile's search never
    proposes a CUDA point (the judge would refuse it there: require_language)."""
    import sys
    import types

    from ferret.gate import judge

    allows_cuda = types.SimpleNamespace(contract=types.SimpleNamespace(backend=Backend(allowed_languages=["cuda"])))
    triton_only = types.SimpleNamespace(contract=types.SimpleNamespace(backend=Backend()))
    assert judge.judged_languages(allows_cuda, "cpu") == ["triton"]  # type: ignore[arg-type]
    monkeypatch.setattr(judge, "device_for", lambda profile: "cuda" if profile == "gpu" else "cpu")
    assert judge.judged_languages(allows_cuda, "gpu") == ["triton", "cuda"]  # type: ignore[arg-type]
    assert judge.judged_languages(triton_only, "gpu") == ["triton"]  # type: ignore[arg-type]
    monkeypatch.setitem(sys.modules, "cupy_backends.cuda.libs", None)  # no NVRTC on this machine
    monkeypatch.delitem(sys.modules, "cupy_backends.cuda.libs.nvrtc", raising=False)
    assert judge.judged_languages(allows_cuda, "gpu") == ["triton"]  # type: ignore[arg-type]
    cuda_only = types.SimpleNamespace(contract=types.SimpleNamespace(backend=Backend(language="cuda")))
    assert judge.judged_languages(cuda_only, "cpu") == ["cuda"]  # type: ignore[arg-type]  # refused at the first check
