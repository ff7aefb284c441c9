"""The scan's rule registry and presets: every registered rule fires on a snippet of its own, on the line
marked `# here`; presets name registered rules only; each rule names its cheat and catalogue entries.

A rule added to the registry without a snippet here fails `test_every_rule_has_a_snippet`.
"""

from __future__ import annotations

import ast
import textwrap

import pytest

from ferret.integrity.context import ScanContext
from ferret.integrity.model import CHEATS, RUNTIME_ONLY
from ferret.integrity.presets import PRESETS, rules_for
from ferret.integrity.registry import RULES, catalogue_rows, register
from ferret.integrity.scan import run_rules, scan_file, scan_source

BASE = """\
import math

import torch
import triton
import triton.language as tl

{top}


@triton.jit
def _copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(x_ptr + offs, mask=offs < n)
{kernel}
    tl.store(y_ptr + offs, v, mask=offs < n)


def run(inputs, outputs, params, trace=None):
    x = inputs["x"]
    y = outputs["y"]
    _copy_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
{body}
"""


def snippet(body: str = "", top: str = "", kernel: str = "") -> str:
    """An honest candidate with `top` at module level, `kernel` in its kernel and `body` at the end of run."""
    return BASE.format(
        top=textwrap.dedent(top).strip("\n"),
        kernel=textwrap.indent(textwrap.dedent(kernel).strip("\n"), "    "),
        body=textwrap.indent(textwrap.dedent(body).strip("\n"), "    "),
    )


def _cuda(line: str, before: str = "") -> str:
    """An honest candidate that also holds a CUDA kernel with `line` in its body (and `before` above it)."""
    return snippet(
        top='from ferret.backends import cuda\n\nK = cuda.Source(r"""\n' + before + "\n"
        'extern "C" __global__ void k(float* y) {\n    ' + line + '\n}\n""")'
    )


SNIPPETS: dict[str, str] = {
    # --- run and its tensors
    "run_missing": "import torch  # here\n\n\ndef forward(x):\n    return x\n",
    "run_signature": "def run(inputs):  # here\n    pass\n",
    "outputs_unused": "def run(inputs, outputs, params, trace=None):  # here\n    pass\n",
    "run_returns_value": snippet("return y  # here"),
    "outputs_entry_rebound": snippet('outputs["y"] = x.clone()  # here'),
    "output_data_rebound": snippet("y.data = x  # here"),
    "outputs_dict_mutated": snippet("outputs.update({})  # here"),
    "inputs_entry_replaced": snippet('inputs["x"] = x.clone()  # here'),
    "input_written": snippet("x[0] = 0.0  # here"),
    "input_data_rebound": snippet("x.data = y  # here"),
    "inputs_dict_mutated": snippet('inputs.pop("x")  # here'),
    "input_changed_in_place": snippet("x.zero_()  # here"),
    "setattr_tensor_data": snippet('setattr(x, "data", y)  # here'),
    "output_constant_write": snippet("y[:] = 0.0  # here"),
    "output_constant_fill": snippet("y.zero_()  # here"),
    "output_indexing_copy": snippet("y[:] = x  # here"),
    # --- state across calls, patched modules
    "global_statement": snippet("global calls  # here\ncalls += 1", top="calls = 0"),
    "nonlocal_statement": snippet(
        top="""
        def _counter():
            n = 0

            def bump():
                nonlocal n  # here
                n += 1
            return bump
    """
    ),
    "function_attribute": snippet("run.calls = 1  # here"),
    "setattr_function": snippet('setattr(run, "calls", 1)  # here'),
    "counter_update": snippet("_count[0] += 1  # here", top="_count = [0]"),
    "argument_kept": snippet('_last["y"] = y  # here', top="_last = {}"),
    "argument_appended": snippet("_seen.append(x)  # here", top="_seen = []"),
    "module_attribute_patched": snippet(top="torch.cuda.synchronize = lambda: None  # here"),
    "interpreter_attribute_replaced": snippet(top="import sys\nsys.path = []  # here"),
    "timer_method_patched": snippet("start.elapsed_time = lambda end: 0.0  # here"),
    "module_state_written": snippet(top="torch.backends.flags[0] = 1  # here"),
    "interpreter_state_written": snippet(top='import sys\nsys.modules["torch"] = None  # here'),
    "setattr_module": snippet(top='setattr(torch, "equal", lambda a, b: True)  # here'),
    "setattr_interpreter": snippet(top='import sys\nsetattr(sys, "path", [])  # here'),
    # --- lazy results, raw storage
    "torch_hook_defined": snippet(
        top="""
        class Deferred:
            def __torch_function__(cls, func, types, args=(), kwargs=None):  # here
                return func(*args)
    """
    ),
    "tensor_subclass": snippet(top="class Lazy(torch.Tensor):  # here\n    pass"),
    "class_swapped": snippet("y.__class__ = Lazy  # here"),
    "setattr_class": snippet('setattr(y, "__class__", Lazy)  # here'),
    "dynamic_class": snippet('Lazy = type("Lazy", (torch.Tensor,), {})  # here'),
    "legacy_storage": snippet("s = y.storage()  # here"),
    "storage_swapped": snippet("y.set_(x)  # here"),
    # --- library calls
    "try_fallback": snippet("try:  # here\n    pass\nexcept Exception:\n    pass"),
    "torch_cuda_call": snippet("torch.cuda.synchronize()  # here"),
    "torch_call": snippet("z = torch.softmax(x, dim=-1)  # here"),
    "operator_matmul": snippet("z = operator.matmul(x, x)  # here", top="import operator"),
    "contextlib_suppress": snippet("with contextlib.suppress(Exception):  # here\n    pass", top="import contextlib"),
    "numpy_call": snippet("z = np.zeros(3)  # here", top="import numpy as np"),
    "compute_method": snippet("s = x.sum(dim=-1)  # here"),
    "matmul_operator": snippet("z = x @ x  # here"),
    "torch_function_passed": snippet("z = list(map(torch.exp, [x]))  # here"),
    "builtin.reading_expected": snippet('v = eval("1 + 1")  # here'),
    "builtin.result_forging": snippet('print("hi")  # here'),
    "builtin.cross_call_caching": snippet("key = id(x)  # here"),
    # --- imports
    "relative_import": snippet(top="from . import reference  # here"),
    "import_mention.side_stream_or_thread": snippet(top="import threading  # here"),
    "import_mention.cross_call_caching": snippet(top="from functools import lru_cache  # here"),
    "import_mention.allocator_reuse": snippet(top="import torch.cuda.memory  # here"),
    "import_mention.lazy_result": snippet(top="import torch.overrides  # here"),
    "import_mention.reading_expected": snippet(top="import inspect  # here"),
    "import_mention.shadowing": snippet(top="from os import environ  # here"),
    "import_mention.harness_patching": snippet(top="from triton.testing import do_bench  # here"),
    "import_mention.lower_precision": snippet(top="from torch import autocast  # here"),
    "import_mention.result_forging": snippet(top="from sys import stdout  # here"),
    "import_mention.nan_wildcard": snippet(top="from math import nan  # here"),
    "import_mention.library_call": snippet(top="import cupyx  # here"),
    "import.reference_import": snippet(top="import tasks.rmsnorm.reference  # here"),
    "import.library_call": snippet(top="import torch.nn.functional as F  # here"),
    "import.reading_expected": snippet(top="import os  # here"),
    "import.side_stream_or_thread": snippet(top="import subprocess  # here"),
    "import.harness_patching": snippet(top="import time  # here"),
    "import.cross_call_caching": snippet(top="import weakref  # here"),
    "import.shadowing": snippet(top="import site  # here"),
    "import.persisting_l2": snippet(top="import cupy  # here"),
    "import.result_forging": snippet(top="import logging  # here"),
    "import.gate_tampering": snippet(top="import hashlib  # here"),
    "import.lazy_result": snippet(top="import torch._subclasses  # here"),
    "import.allocator_reuse": snippet(top="import torch.cuda.memory  # here"),
    "import.lower_precision": snippet(top="import torch.amp  # here"),
    "unlisted_import": snippet(top="import scipy  # here"),
    "star_import": snippet(top="from torch import *  # here"),
    # --- names, attributes, strings
    "name.reading_expected": snippet("here = __file__  # here"),
    "name.lazy_result": snippet("hook = __torch_function__  # here"),
    "attribute.cross_call_caching": snippet("key = x.data_ptr()  # here"),
    "attribute.allocator_reuse": snippet("s = y.untyped_storage()  # here"),
    "attribute.reading_expected": snippet("g = run.__globals__  # here"),
    "attribute.harness_patching": snippet("t = start.elapsed_time(end)  # here"),
    "attribute.lazy_result": snippet("hook = y.__torch_dispatch__  # here"),
    "attribute.lower_precision": snippet("flag = torch.backends.cuda.matmul.allow_tf32  # here"),
    "attribute.result_forging": snippet("out = log.stderr  # here"),
    "nan_to_num": snippet("y.copy_(y.nan_to_num())  # here"),
    "float_nan": snippet('bad = float("nan")  # here'),
    "persisting_identifier": snippet('attr = "cudaLimitPersistingL2CacheSize"  # here'),
    "mention.side_stream_or_thread": snippet("s = torch.cuda.Stream()  # here"),
    "mention.cross_call_caching": snippet("g = torch.cuda.CUDAGraph()  # here"),
    "mention.allocator_reuse": snippet("torch.cuda.empty_cache()  # here"),
    "mention.lazy_result": snippet("make = torch.Tensor._make_subclass  # here"),
    "mention.reading_expected": snippet("frame = sys._getframe(1)  # here", top="import sys"),
    "mention.shadowing": snippet("found = sys.modules  # here", top="import sys"),
    "mention.harness_patching": snippet("bench = triton.testing  # here"),
    "mention.lower_precision": snippet('torch.set_float32_matmul_precision("high")  # here'),
    "mention.result_forging": snippet('sys.stdout.write("x")  # here', top="import sys"),
    "mention.nan_wildcard": snippet("bad = math.nan  # here"),
    "mention.library_call": snippet("y32 = cupy.multiply(a, b)  # here", top="import cupy"),
    "string.result_forging": snippet('where = "report.json"  # here'),
    "string.gate_tampering": snippet('name = "golden.safetensors"  # here'),
    "string.reference_import": snippet('path = "tasks/rmsnorm/reference.py"  # here'),
    "string.reading_expected": snippet('maps = "/proc/self/maps"  # here'),
    "string.shadowing": snippet('code = "sys.modules"  # here'),
    "string.lazy_result": snippet('hook = "__torch_dispatch__"  # here'),
    "module_file_string": snippet('shim = "torch.py"  # here'),
    # --- precision
    "precision_flag_set": snippet("torch.backends.cuda.matmul.allow_tf32 = True  # here"),
    "triton_cast": snippet(kernel="v = tl.cast(v, tl.float16)  # here"),
    "method_cast": snippet("xh = x.half()  # here"),
    "precision_keyword": snippet("buf = torch.empty(x.shape, dtype=torch.float16, device=x.device)  # here"),
    # --- hard-coded cases (shape constants {7168, 4096})
    "case_dim_compared": snippet("if x.shape[1] == 7168:  # here\n    pass"),
    "case_dim_keyed": snippet("blocks = {7168: 128, 4096: 64}  # here"),
    "case_dim_matched": snippet("match x.shape[1]:\n    case 7168:  # here\n        pass"),
    # --- decoys
    "never_taken_branch": snippet("if False:  # here\n    pass"),
    "never_taken_else": snippet("if True:\n    pass\nelse:\n    z = 1  # here"),
    "unreachable_code": snippet("return\nz = 1  # here"),
    "unlaunched_kernel": snippet(top="@triton.jit\ndef _fast_kernel(x_ptr, y_ptr):  # here\n    pass"),
    # --- CUDA source (the line inside the CUDA string ends with the mark, after a CUDA comment)
    "cuda_other_stream_or_launch": _cuda("cudaStream_t s; cudaStreamCreate(&s); // # here"),
    "cuda_clock_read": _cuda("long long t = clock64(); // # here"),
    "cuda_host_memory": _cuda("float* h; cudaHostGetDevicePointer((void**)&h, y, 0); // # here"),
    "cuda_library": _cuda("cublasSscal(handle, 1, &a, y, 1); // # here"),
    "cuda_device_state": _cuda("y[0] = 1.f;", before="__device__ int calls = 0; // # here"),
    "cuda_persisting_l2": _cuda("cudaStreamAttrValue v; v.accessPolicyWindow.hitRatio = 1.f; // # here"),
    "cuda_backend_attribute": snippet("e = cuda.os.environ  # here", top="from ferret.backends import cuda"),
    "cuda_source_not_literal": snippet(
        top='from ferret.backends import cuda\n\nPARTS = ["extern"]\nK = cuda.Source(" ".join(PARTS))  # here'
    ),
    # --- access the scan cannot follow, and data taken to the host
    "computed_attribute_name": snippet('f = getattr(torch, "soft" + "max")  # here'),
    "attribute_builtin_handed_on": snippet("get = getattr  # here"),
    "namespace_builtin": snippet('f = vars(torch)["softmax"]  # here'),
    "attribute_getter": snippet('f = operator.attrgetter("nn.functional")  # here', top="import operator"),
    "namespace_attribute": snippet('f = torch.__dict__["softmax"]  # here'),
    "reexported_module": snippet("np = interp.np  # here", top="import triton.runtime.interpreter as interp"),
    "host_extraction_method": snippet("rows = x.tolist()  # here"),
}

SHAPE_CONSTANTS = {7168, 4096}


def _marked_line(source: str) -> int:
    (line,) = [n for n, text in enumerate(source.splitlines(), start=1) if text.endswith("# here")]
    return line


def test_every_rule_has_a_snippet():
    assert sorted(set(RULES) - set(SNIPPETS)) == [], "registered rules without a snippet that makes them fire"
    assert sorted(set(SNIPPETS) - set(RULES)) == [], "snippets for rules that are not registered"


def test_the_base_snippet_scans_clean():
    assert scan_source(snippet(), shape_constants=SHAPE_CONSTANTS).passed


@pytest.mark.parametrize("name", sorted(SNIPPETS))
def test_rule_fires_on_its_snippet(name):
    source = SNIPPETS[name]
    rule = RULES[name]
    ctx = ScanContext(source, ast.parse(source), SHAPE_CONSTANTS)
    lines = {getattr(hit.node, "lineno", 1) for hit in rule.check(ctx)}
    assert _marked_line(source) in lines, f"{name} does not fire on the marked line (it fires on {sorted(lines)})"
    # alone, the rule reports its cheat there; in the full scan the cheat is reported there too
    alone = run_rules(ctx, [rule])
    assert {f.cheat for f in alone} == {rule.cheat}
    full = scan_source(source, shape_constants=SHAPE_CONSTANTS)
    assert (rule.cheat, _marked_line(source)) in {(f.cheat, f.line) for f in full.findings}


def test_registry_lists_each_rule_with_its_cheat_and_catalogue_entries():
    rows = list(catalogue_rows())
    assert [row[0] for row in rows] == list(RULES)
    for name, cheat, catalogue, doc in rows:
        assert cheat in CHEATS and cheat != "syntax_error", name
        assert catalogue == CHEATS[cheat] and catalogue, name
        assert doc, f"{name} has no description"
    # every cheat the scan can see statically has at least one rule (impossible speed is a runtime matter)
    assert {row[1] for row in rows} == set(CHEATS) - RUNTIME_ONLY - {"syntax_error"}


def test_register_refuses_duplicates_and_unknown_cheats():
    with pytest.raises(ValueError, match="try_fallback"):
        register("try_fallback", "library_call", lambda ctx: ())
    with pytest.raises(ValueError, match="not_a_cheat"):
        register("some_new_rule", "not_a_cheat", lambda ctx: ())
    with pytest.raises(ValueError, match="syntax_error"):
        register("some_new_rule", "syntax_error", lambda ctx: ())
    assert "some_new_rule" not in RULES


def test_presets_name_registered_rules_only():
    assert "triton" in PRESETS
    for preset, names in PRESETS.items():
        assert names, preset
        assert set(names) <= set(RULES), preset
        assert len(set(names)) == len(names), preset
    assert set(PRESETS["triton"]) == set(RULES), "the judge's preset is every rule"
    assert [r.name for r in rules_for("triton")] == list(RULES)


def test_unknown_preset_is_a_value_error_naming_it(tmp_path):
    with pytest.raises(ValueError, match="'strictest'"):
        scan_source(snippet(), preset="strictest")
    with pytest.raises(ValueError, match="'strictest'"):
        rules_for("strictest")
    path = tmp_path / "cand.py"
    path.write_bytes(b"\xff\xfe not utf-8")
    with pytest.raises(ValueError, match="'strictest'"):
        scan_file(path, preset="strictest")


def test_default_preset_is_triton():
    source = SNIPPETS["torch_call"] + "\nimport os\n"
    assert scan_source(source, shape_constants=SHAPE_CONSTANTS) == scan_source(
        source, shape_constants=SHAPE_CONSTANTS, preset="triton"
    )


def test_minimal_preset_reports_the_tampering_cheats_of_the_full_scan():
    """A preset that keeps every rule of a cheat reports that cheat exactly as the full scan does."""
    source = snippet('print("GATE_RESULT")\nz = torch.softmax(x, -1)\nopen("gates/x")', top="import os")
    full = scan_source(source, preset="triton").findings
    minimal = scan_source(source, preset="minimal").findings
    cheats = {RULES[name].cheat for name in PRESETS["minimal"]}
    assert minimal == [f for f in full if f.cheat in cheats]
    assert {f.cheat for f in full} - cheats == {"library_call"}


@pytest.mark.parametrize(
    "code, line_message",
    [
        # `sys` is banned as a module before `_getframe` is a banned name: the module's reason is kept
        ("from sys import _getframe", "imports sys: it reaches the file system"),
        # the first module of the statement is examined first
        ("import sys, inspect", "imports sys: it reaches the file system"),
        ("import inspect, sys", "imports inspect: it reads the interpreter's frames"),
        # the store is examined before the attribute it writes
        ('sys.modules["torch"] = None', "writes sys.modules['torch']: it changes state"),
    ],
)
def test_one_finding_per_cheat_and_spot_keeps_the_first_examined(code, line_message):
    source = snippet(top=f"import sys\n{code}")
    findings = [f for f in scan_source(source).findings if f.code == code]
    by_cheat = {}
    for f in findings:
        assert f.cheat not in by_cheat, "two findings of one cheat on one spot"
        by_cheat[f.cheat] = f
    assert any(line_message in f.message for f in findings), [f.message for f in findings]
