"""A candidate's language is read from its imports: CUDA C++ when it imports the judge's CUDA backend."""

from __future__ import annotations

import pytest

from ferret.backends import language_of
from ferret.contract.model import Backend


@pytest.mark.parametrize(("source", "language"), [
    ("from ferret.backends import cuda\n", "cuda"),
    ("import ferret.backends.cuda as cu\n", "cuda"),
    ("from ferret.backends.cuda import Source\n", "cuda"),
    ("import triton\nimport triton.language as tl\n", "triton"),
    ("from ferret.backends import language_of\n", "triton"),
    ("def run(:\n", "triton"),
])
def test_the_language_follows_the_imports(source, language):
    assert language_of(source) == language


def test_a_contract_allows_its_language_and_those_it_names():
    assert Backend().allows("triton") and not Backend().allows("cuda")
    both = Backend(allowed_languages=["cuda"])
    assert both.allows("triton") and both.allows("cuda")
    assert Backend(language="cuda").allows("cuda") and not Backend(language="cuda").allows("triton")
