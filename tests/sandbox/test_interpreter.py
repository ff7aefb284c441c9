"""The Triton interpreter without its repeated language patch and its unasserted overflow checks: the same bits out,
far fewer patches, no overflow check computed. And its `__index__` fixed where numpy refuses `int()` of a scalar's
one-element array (triton 3.6 under numpy 2.5): a loop bounded by a kernel argument runs.

Each run is a process of its own (the speed-ups change the interpreter module for the whole process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent("""
    import json, sys
    import torch
    import triton
    import triton.language as tl
    from triton.runtime import interpreter

    from ferret.sandbox import interpreter as ferret_interpreter
    from ferret.sandbox.interpreter import memoize_language_patch, prepare_interpreter, speed_up_interpreter

    # whether this Triton's own `__index__` refuses a scalar's one-element array under this numpy
    index_refused = ferret_interpreter._index_refuses_one_element_arrays(interpreter._patch_lang_tensor)
    patch_lang_tensor = interpreter._patch_lang_tensor

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
    modes = {"plain": lambda: False, "memo": memoize_language_patch, "fast": speed_up_interpreter,
             "prepared": prepare_interpreter}
    memoized = modes[sys.argv[1]]()


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


    @triton.jit
    def row_sums(src, dst, n, BLOCK: tl.constexpr):
        # `range` bounded by a kernel argument: the interpreter converts `n` through tl.tensor.__index__
        acc = tl.zeros([BLOCK], tl.int32)
        for start in range(0, n, BLOCK):
            offsets = start + tl.arange(0, BLOCK)
            acc += tl.load(src + tl.program_id(0) * n + offsets, mask=offsets < n, other=0)
        tl.store(dst + tl.program_id(0), tl.sum(acc, axis=0))


    loop = {}
    if sys.argv[1] == "prepared":  # unprepared, triton 3.6 under numpy 2.5 raises here
        rows = torch.randint(-1000, 1000, (3, 1000), dtype=torch.int32, generator=torch.Generator().manual_seed(0))
        sums = torch.zeros(3, dtype=torch.int32)
        row_sums[(3,)](rows, sums, 1000, BLOCK=128)
        loop = {"sums": sums.tolist(), "torch": rows.sum(dim=1, dtype=torch.int32).tolist()}

    src = torch.linspace(-3, 3, 100, dtype=torch.float32)
    dst = torch.full_like(src, float("nan"))
    wrapped = torch.zeros(100, dtype=torch.int32)
    kernel[(4,)](src, dst, wrapped, 100, BLOCK=32, STEPS=5)
    kernel[(4,)](src, dst, wrapped, 100, BLOCK=32, STEPS=5)
    print(json.dumps({"memoized": memoized, "patches": len(patches), "out": dst.view(torch.int32).tolist(),
                      "wrapped": wrapped.tolist(), "overflow_checks": len(overflow_checks), "loop": loop,
                      "index_refused": index_refused, "index_fixed": ferret_interpreter._INDEX_FIXED == [True],
                      "index_patch_kept": interpreter._patch_lang_tensor is patch_lang_tensor,
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
def runs(tmp_path_factory) -> tuple[dict, dict, dict, dict]:
    tmp = tmp_path_factory.mktemp("interpreter")
    return _run(tmp, "plain"), _run(tmp, "memo"), _run(tmp, "fast"), _run(tmp, "prepared")


def test_the_memo_gives_the_same_bits(runs):
    plain, memo, _, _ = runs
    assert memo["memoized"] and not plain["memoized"]
    assert memo["out"] == plain["out"] and memo["wrapped"] == plain["wrapped"]


def test_without_the_unasserted_overflow_checks_the_same_bits_and_no_check_computed(runs):
    plain, memo, fast, _ = runs
    assert fast["memoized"]
    assert fast["out"] == plain["out"] and fast["wrapped"] == plain["wrapped"]
    # the int32 products did leave int32's range, and wrapped as on the GPU
    assert fast["wrapped"][99] == ((99 * 1000003 + 7) * 4099 + 2**31) % 2**32 - 2**31
    assert plain["overflow_checks"] > 0 and memo["overflow_checks"] == plain["overflow_checks"]
    assert fast["overflow_checks"] == 0
    assert fast["patches"] == memo["patches"]


def test_the_memo_patches_once_per_launch_instead_of_once_per_helper_call(runs):
    plain, memo, _, _ = runs
    # Two launches of 4 programs, each calling _step (and through it _scale) 5 times, and tl.sum's combine
    # function (triton.language.standard) once.
    assert plain["patches"] == 2 * (1 + 4 * (5 * 2 + 1))
    # Once for the kernel, and once for the combine function, whose module sees tl.core where the kernel
    # sees tl (a language module the grid had not patched yet): per launch.
    assert memo["patches"] == 2 * 2


def test_the_prepared_interpreter_gives_the_same_bits_and_runs_a_loop_bounded_by_an_argument(runs):
    plain, _, fast, prepared = runs
    assert prepared["memoized"] and prepared["overflow_checks"] == 0
    assert prepared["patches"] == fast["patches"] + 2  # and row_sums' one launch: its kernel and tl.sum's combine
    assert prepared["out"] == plain["out"] and prepared["wrapped"] == plain["wrapped"]
    assert prepared["loop"]["sums"] == prepared["loop"]["torch"]
    # The index fix is installed exactly where this Triton's own `__index__` refuses (triton 3.6 under numpy 2.5), and
    # elsewhere (triton 3.9, or an older numpy) leaves the interpreter's function in place.
    assert prepared["index_fixed"] == prepared["index_refused"]
    assert prepared["index_patch_kept"] == (not prepared["index_refused"])
    assert not fast["index_fixed"] and fast["index_patch_kept"]


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


def _int_as_numpy_2_5(data):
    # numpy 2.5's `int()`: only a 0-d array converts
    if data.ndim > 0:
        raise TypeError("only 0-dimensional arrays can be converted to Python scalars")
    return int(data)


def _patch_lang_tensor_of_triton_3_6(tensor, scope):
    # triton 3.6's `_patch_lang_tensor`, its `int()` as numpy 2.5's (`__bool__` to check that the rest is left alone)
    scope.set_attr(tensor, "__index__", lambda self: _int_as_numpy_2_5(self.handle.data))
    scope.set_attr(tensor, "__bool__", lambda self: bool(self.handle.data))


def test_the_index_fix_converts_a_scalars_one_element_array_through_its_element(monkeypatch):
    import operator
    from types import SimpleNamespace

    import numpy as np
    import triton.runtime.interpreter as interpreter

    from ferret.sandbox import interpreter as fix

    monkeypatch.setattr(interpreter, "_patch_lang_tensor", _patch_lang_tensor_of_triton_3_6)
    monkeypatch.setattr(fix, "_INDEX_FIXED", [])
    assert fix.fix_scalar_tensor_index() is True
    assert interpreter._patch_lang_tensor is not _patch_lang_tensor_of_triton_3_6
    assert interpreter._patch_lang_tensor.__name__ == "_patch_lang_tensor_of_triton_3_6"  # read as the interpreter's

    class Tensor:
        def __init__(self, data):
            self.handle = SimpleNamespace(data=data)

    def scalar(data) -> Any:  # a tensor, as the interpreter's patch makes it
        return Tensor(data)

    scope = interpreter._LangPatchScope()
    interpreter._patch_lang_tensor(Tensor, scope)
    assert operator.index(scalar(np.array([7], dtype=np.int32))) == 7
    assert range(0, scalar(np.array([40], dtype=np.int64)), 16) == range(0, 40, 16)
    # numpy's own conversions of the element: truncation, bool, a uint64 past int64
    assert operator.index(scalar(np.array([-2.7], dtype=np.float32))) == -2
    assert operator.index(scalar(np.array([True]))) == 1
    assert operator.index(scalar(np.array([2**63 + 5], dtype=np.uint64))) == 2**63 + 5
    assert operator.index(scalar(np.array(9, dtype=np.int32))) == 9  # a 0-d array, as before
    with pytest.raises(TypeError):  # more than one element: refused, as the interpreter's own refuses it
        operator.index(scalar(np.array([1, 2], dtype=np.int32)))
    assert bool(scalar(np.array([0]))) is False  # the rest of the interpreter's patch is its own
    scope.restore()  # undone with the grid's patch: nothing left on the class
    assert "__index__" not in Tensor.__dict__ and "__bool__" not in Tensor.__dict__
    assert fix.fix_scalar_tensor_index() is True  # installed once
    monkeypatch.setattr(interpreter, "_patch_lang_tensor", _patch_lang_tensor_of_triton_3_6)
    assert fix.fix_scalar_tensor_index() is True and interpreter._patch_lang_tensor is _patch_lang_tensor_of_triton_3_6


def test_the_index_fix_installs_nothing_where_the_conversion_is_accepted(monkeypatch):
    import warnings

    import numpy as np
    import triton.runtime.interpreter as interpreter

    from ferret.sandbox import interpreter as fix

    def patch_lang_tensor_of_triton_3_9(tensor, scope):
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.squeeze()))

    def patch_lang_tensor_of_triton_3_6(tensor, scope):  # with this machine's numpy's `int()`
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            numpy_refuses = int(np.array([7])) != 7
        except TypeError:
            numpy_refuses = True
    monkeypatch.setattr(fix, "_INDEX_FIXED", [])
    for patch, refuses in ((patch_lang_tensor_of_triton_3_9, False), (patch_lang_tensor_of_triton_3_6, numpy_refuses)):
        monkeypatch.setattr(interpreter, "_patch_lang_tensor", patch)
        assert fix.fix_scalar_tensor_index() is refuses
        assert (interpreter._patch_lang_tensor is patch) is not refuses
    monkeypatch.delattr(interpreter, "_patch_lang_tensor")
    assert fix.fix_scalar_tensor_index() is False


def test_calibration_prepares_the_interpreter_its_honest_implementations_run_under(monkeypatch):
    # Calibration runs the honest implementations in its own process: the interpreter must be the candidates' one
    # (fixed and sped up), or an honest kernel raising there would leave its stages uncalibrated.
    from ferret.gate import calibrate

    prepared = []
    monkeypatch.setattr(calibrate, "prepare_interpreter", lambda: prepared.append(True) or True)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    calibrate._interpret_on_cpu("cpu")
    assert prepared == [True]
    monkeypatch.delenv("TRITON_INTERPRET")
    monkeypatch.setattr(calibrate.torch.cuda, "is_available", lambda: True)
    calibrate._interpret_on_cpu("cuda")
    assert prepared == [True]  # a GPU run: no interpreter, nothing prepared
