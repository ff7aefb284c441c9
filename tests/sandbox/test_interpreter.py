"""The Triton interpreter without its repeated language patch: the same bits out, far fewer patches.

Each run is a process of its own (the memo changes the interpreter module for the whole process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent('''
    import json, sys
    import torch
    import triton
    import triton.language as tl
    from triton.runtime import interpreter

    from ferret.sandbox.interpreter import memoize_language_patch

    patches = []
    original = interpreter._patch_lang

    def counting(fn):
        patches.append(fn.__name__)
        return original(fn)

    interpreter._patch_lang = counting
    memoized = memoize_language_patch() if sys.argv[1] == "memo" else False


    @triton.jit
    def _scale(x, s):
        return x * s + tl.full(x.shape, 1.0, tl.float32)


    @triton.jit
    def _step(x, i):
        return _scale(x, 0.5) + i


    @triton.jit
    def kernel(src, dst, n, BLOCK: tl.constexpr, STEPS: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(src + offsets, mask=offsets < n, other=0.0)
        for i in range(STEPS):
            x = _step(x, i)
        tl.static_assert(BLOCK >= 16)
        tl.store(dst + offsets, tl.sum(x, axis=0) + x, mask=offsets < n)


    src = torch.linspace(-3, 3, 100, dtype=torch.float32)
    dst = torch.full_like(src, float("nan"))
    kernel[(4,)](src, dst, 100, BLOCK=32, STEPS=5)
    kernel[(4,)](src, dst, 100, BLOCK=32, STEPS=5)
    print(json.dumps({"memoized": memoized, "patches": len(patches), "out": dst.view(torch.int32).tolist(),
                      "restored": tl.range is not None and not getattr(tl.range, "__name__", "") == "_new_range"}))
''')


def _run(tmp_path: Path, mode: str) -> dict:
    script = tmp_path / "kernel_script.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, str(script), mode], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[dict, dict]:
    tmp = tmp_path_factory.mktemp("interpreter")
    return _run(tmp, "plain"), _run(tmp, "memo")


def test_the_memo_gives_the_same_bits(runs):
    plain, memo = runs
    assert memo["memoized"] and not plain["memoized"]
    assert memo["out"] == plain["out"]


def test_the_memo_patches_once_per_launch_instead_of_once_per_helper_call(runs):
    plain, memo = runs
    # Two launches of 4 programs, each calling _step (and through it _scale) 5 times, and tl.sum's combine
    # function (triton.language.standard) once.
    assert plain["patches"] == 2 * (1 + 4 * (5 * 2 + 1))
    # Once for the kernel, and once for the combine function, whose module sees tl.core where the kernel
    # sees tl (a language module the grid had not patched yet): per launch.
    assert memo["patches"] == 2 * 2


def test_the_language_is_given_back_after_each_launch(runs):
    plain, memo = runs
    assert plain["restored"] and memo["restored"]


def test_the_memo_changes_nothing_without_the_interpreter_it_expects(monkeypatch):
    import triton.runtime.interpreter as interpreter

    from ferret.sandbox import interpreter as memo

    monkeypatch.delattr(interpreter, "_patch_lang")
    assert memo.memoize_language_patch() is False
