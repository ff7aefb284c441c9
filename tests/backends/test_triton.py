"""The Triton backend: the default language, available on every profile (compiled on a GPU, interpreted
elsewhere), nothing to load before the sandbox, its compiled and interpreted launches recorded by kernel name."""

from __future__ import annotations

import ast

import pytest
import torch
import triton
import triton.language as tl

from ferret.backends import backend
from ferret.backends.triton import BACKEND
from ferret.integrity.presets import PRESETS
from ferret.integrity.registry import RULES


def test_it_is_registered_as_triton():
    assert backend("triton") is BACKEND and BACKEND.title == "Triton" and BACKEND.module is None


def test_it_claims_any_source_it_is_asked_about():
    assert BACKEND.claims(ast.parse("import triton\n")) and BACKEND.claims(ast.parse(""))


@pytest.mark.parametrize(("device", "profile"), [("cpu", "cpu"), ("cuda", "gpu")])
def test_it_can_be_judged_on_every_profile(device, profile):
    assert BACKEND.unavailable(device, profile) is None


def test_it_loads_nothing_before_the_sandbox_and_adds_no_environment(tmp_path):
    assert BACKEND.load_before_sandbox(on_gpu=False) is None
    assert BACKEND.settings(tmp_path, {"std": "c++17"}) == {}


def test_a_candidate_may_import_tritons_modules():
    assert BACKEND.imports == ("triton", "triton.language", "triton.runtime", "triton.compiler", "triton.tools")


def test_its_scan_preset_runs_every_rule():
    assert set(PRESETS[BACKEND.scan_preset]) == set(RULES)


def test_its_launch_points_are_the_compiled_and_the_interpreted_run():
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    points = {p.label: p for p in BACKEND.launch_points()}
    assert set(points) == {"JITFunction.run", "InterpretedFunction.run"}
    assert (points["JITFunction.run"].owner, points["JITFunction.run"].attribute) == (JITFunction, "run")
    assert (points["InterpretedFunction.run"].owner, points["InterpretedFunction.run"].attribute) == (InterpretedFunction, "run")


@triton.jit
def _add_one(x_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    inside = offsets < n
    tl.store(x_ptr + offsets, tl.load(x_ptr + offsets, mask=inside) + 1, mask=inside)


def test_an_interpreted_launch_is_counted_by_its_kernels_name(monkeypatch):
    from triton.runtime.interpreter import InterpretedFunction

    from ferret.sandbox.watch import LaunchRecorder

    for point in (p for b in (backend("triton"), backend("cuda")) for p in b.launch_points()):
        monkeypatch.setattr(point.owner, point.attribute, getattr(point.owner, point.attribute))  # back at teardown
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    kernel = InterpretedFunction(_add_one.fn)
    recorder = LaunchRecorder()
    x = torch.zeros(8)
    kernel[(1,)](x, 8, BLOCK=8)
    assert recorder.counts == {"_add_one": 1} and float(x.sum()) == 8.0
    recorder.noop = True
    kernel[(1,)](x, 8, BLOCK=8)
    assert recorder.counts == {"_add_one": 2} and float(x.sum()) == 8.0  # the no-op launch changed nothing
