"""The Triton interpreter without its repeated language patch and its unasserted overflow checks: the same bits out,
far fewer patches, no overflow check computed.

Each run is a process of its own (the speed-ups change the interpreter module for the whole process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent("""
    import json, sys
    import torch
    import triton
    import triton.language as tl
    from triton.runtime import interpreter

    from ferret.sandbox.interpreter import memoize_language_patch, speed_up_interpreter

    patches = []
    original = interpreter._patch_lang

    def counting(fn):
        patches.append(fn.__name__)
        return original(fn)

    interpreter._patch_lang = counting
    # the `<=` of the overflow check (the kernel itself compares nothing with <=)
    overflow_checks = []
    compare = interpreter.InterpreterBuilder.create_icmpSLE
    interpreter.InterpreterBuilder.create_icmpSLE = lambda self, a, b: overflow_checks.append(1) or compare(self, a, b)
    memoized = {"plain": lambda: False, "memo": memoize_language_patch, "fast": speed_up_interpreter}[sys.argv[1]]()


    @triton.jit
    def _scale(x, s):
        return x * s + tl.full(x.shape, 1.0, tl.float32)


    @triton.jit
    def _step(x, i):
        return _scale(x, 0.5) + i


    @triton.jit
    def kernel(src, dst, wrapped, n, BLOCK: tl.constexpr, STEPS: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(src + offsets, mask=offsets < n, other=0.0)
        for i in range(STEPS):
            x = _step(x, i)
        tl.static_assert(BLOCK >= 16)
        tl.store(dst + offsets, tl.sum(x, axis=0) + x, mask=offsets < n)
        # int32 arithmetic past int32's range: it wraps, checked or not
        tl.store(wrapped + offsets, (offsets * 1000003 + 7) * 4099, mask=offsets < n)


    src = torch.linspace(-3, 3, 100, dtype=torch.float32)
    dst = torch.full_like(src, float("nan"))
    wrapped = torch.zeros(100, dtype=torch.int32)
    kernel[(4,)](src, dst, wrapped, 100, BLOCK=32, STEPS=5)
    kernel[(4,)](src, dst, wrapped, 100, BLOCK=32, STEPS=5)
    print(json.dumps({"memoized": memoized, "patches": len(patches), "out": dst.view(torch.int32).tolist(),
                      "wrapped": wrapped.tolist(), "overflow_checks": len(overflow_checks),
                      "restored": tl.range is not None and not getattr(tl.range, "__name__", "") == "_new_range"}))
""")


def _run(tmp_path: Path, mode: str) -> dict:
    script = tmp_path / "kernel_script.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, str(script), mode], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[dict, dict, dict]:
    tmp = tmp_path_factory.mktemp("interpreter")
    return _run(tmp, "plain"), _run(tmp, "memo"), _run(tmp, "fast")


def test_the_memo_gives_the_same_bits(runs):
    plain, memo, _ = runs
    assert memo["memoized"] and not plain["memoized"]
    assert memo["out"] == plain["out"] and memo["wrapped"] == plain["wrapped"]


def test_without_the_unasserted_overflow_checks_the_same_bits_and_no_check_computed(runs):
    plain, memo, fast = runs
    assert fast["memoized"]
    assert fast["out"] == plain["out"] and fast["wrapped"] == plain["wrapped"]
    # the int32 products did leave int32's range, and wrapped as on the GPU
    assert fast["wrapped"][99] == ((99 * 1000003 + 7) * 4099 + 2**31) % 2**32 - 2**31
    assert plain["overflow_checks"] > 0 and memo["overflow_checks"] == plain["overflow_checks"]
    assert fast["overflow_checks"] == 0
    assert fast["patches"] == memo["patches"]


def test_the_memo_patches_once_per_launch_instead_of_once_per_helper_call(runs):
    plain, memo, _ = runs
    # Two launches of 4 programs, each calling _step (and through it _scale) 5 times, and tl.sum's combine
    # function (triton.language.standard) once.
    assert plain["patches"] == 2 * (1 + 4 * (5 * 2 + 1))
    # Once for the kernel, and once for the combine function, whose module sees tl.core where the kernel
    # sees tl (a language module the grid had not patched yet): per launch.
    assert memo["patches"] == 2 * 2


def test_the_language_is_given_back_after_each_launch(runs):
    assert all(run["restored"] for run in runs)


def test_the_memo_changes_nothing_without_the_interpreter_it_expects(monkeypatch):
    import triton.runtime.interpreter as interpreter

    from ferret.sandbox import interpreter as memo

    monkeypatch.delattr(interpreter, "_patch_lang")
    assert memo.memoize_language_patch() is False


def test_the_overflow_checks_stay_where_debug_asserts_them(monkeypatch):
    import dataclasses

    import triton.runtime.interpreter as interpreter

    from ferret.sandbox import interpreter as speed

    builder = interpreter.interpreter_builder
    monkeypatch.setattr(builder, "options", dataclasses.replace(builder.options, debug=True, sanitize_overflow=True))
    assert speed.skip_unasserted_overflow_checks() is False
    assert builder.options.sanitize_overflow
    monkeypatch.setattr(builder, "options", dataclasses.replace(builder.options, debug=False))
    assert speed.skip_unasserted_overflow_checks() is True
    assert not builder.options.sanitize_overflow and not builder.options.debug
    monkeypatch.delattr(interpreter, "interpreter_builder")
    assert speed.skip_unasserted_overflow_checks() is False
