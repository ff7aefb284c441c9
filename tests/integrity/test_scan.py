"""The static integrity scan: honest candidates scan clean; each banned pattern is named, on its line.

Snippets mark each line that must be flagged with `# ! slug [slug ...]`; every finding must fall on a
marked line and every marked slug must be found there.
"""

from __future__ import annotations

import hashlib
import re
import textwrap
from pathlib import Path

import pytest
import yaml

from ferret.integrity import CHEATS, ScanResult, scan_file, scan_source
from ferret.integrity.model import RUNTIME_ONLY
from tasks.mla_attention.simplifications import SIMPLIFICATIONS, variant_source

REPO = Path(__file__).resolve().parents[2]
HONEST = sorted(p for p in REPO.glob("tasks/*/candidates/*.py") if p.name != "__init__.py")


def contract_shape_constants(op: str) -> set[int]:
    """Case dims of the contract (both profiles) above 2, as the judge passes them."""
    data = yaml.safe_load((REPO / "contracts" / f"{op}.yaml").read_text())
    return {v for profile in ("cpu", "gpu") for case in data["cases"][profile] for v in case["dims"].values() if v > 2}


def _show(result: ScanResult) -> str:
    return "\n".join(f"  {f.line}:{f.col} {f.cheat}: {f.message} [{f.code}]" for f in result.findings) or "  (none)"


# ------------------------------------------------------------------------------------------------
# honest code
# ------------------------------------------------------------------------------------------------
def test_honest_candidates_exist():
    """Every shipped contract has an honest candidate, so the scan's clean-code tests cover every task (a contract
    added later is held to this without editing a list here)."""
    shipped = {p.stem for p in (REPO / "contracts").glob("*.yaml") if not p.name.endswith(".tolerances.yaml")}
    assert len(shipped) >= 9 and {p.parent.parent.name for p in HONEST} == shipped


@pytest.mark.parametrize("path", HONEST, ids=lambda p: p.parent.parent.name)
def test_honest_candidate_scans_clean(path):
    result = scan_file(path, shape_constants=contract_shape_constants(path.parent.parent.name))
    assert result.passed, f"{path}:\n{_show(result)}"
    assert result.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert result.path == str(path)


@pytest.mark.parametrize("name", sorted(SIMPLIFICATIONS))
def test_mla_simplified_variants_scan_clean(name):
    """The simplifications are wrong math, not cheats: the scan has nothing to say about them."""
    result = scan_source(variant_source(name), f"mla_{name}.py", contract_shape_constants("mla_attention"))
    assert result.passed, _show(result)


# ------------------------------------------------------------------------------------------------
# snippets
# ------------------------------------------------------------------------------------------------
TEMPLATE = """\
import math

import torch
import triton
import triton.language as tl

{top}

@triton.jit
def _copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def run(inputs, outputs, params, trace=None):
    x = inputs["x"]
    y = outputs["y"]
{pre}
    _copy_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
{post}
"""


def candidate(top: str = "", pre: str = "", post: str = "") -> str:
    return TEMPLATE.format(
        top=textwrap.dedent(top).strip("\n"),
        pre=textwrap.indent(textwrap.dedent(pre).strip("\n"), "    "),
        post=textwrap.indent(textwrap.dedent(post).strip("\n"), "    "),
    )


def test_template_scans_clean():
    result = scan_source(candidate(), shape_constants={7168, 4096, 3})
    assert result.passed, _show(result)


KERNEL_LAUNCH = "_k[(1,)](x, y, x.numel(), BLOCK=16)"

CASES = [
    # --- library_call (9)
    ("torch_softmax", candidate(pre="y.copy_(torch.softmax(x, dim=-1))  # ! library_call")),
    (
        "alias_F_softmax",
        candidate(top="import torch.nn.functional as F  # ! library_call", pre="z = F.softmax(x, dim=-1)  # ! library_call"),
    ),
    ("from_torch_import_matmul", candidate(top="from torch import matmul", pre="z = matmul(x, x)  # ! library_call")),
    (
        "from_torch_nn_import_functional",
        candidate(top="from torch.nn import functional  # ! library_call", pre="z = functional.gelu(x)  # ! library_call"),
    ),
    ("matmul_operator_in_run", candidate(pre="z = x @ x  # ! library_call")),
    ("tensor_sum_method", candidate(pre="s = x.sum(dim=-1)  # ! library_call")),
    ("torch_einsum", candidate(pre='z = torch.einsum("ij,jk->ik", x, x)  # ! library_call')),
    ("assigned_alias", candidate(pre="sm = torch.softmax\nz = sm(x, -1)  # ! library_call")),
    ("getattr_constant", candidate(pre='z = getattr(torch, "softmax")(x, -1)  # ! library_call')),
    # --- dynamic_access (29): a path the scan cannot follow
    ("getattr_computed", candidate(pre='z = getattr(torch, "soft" + "max")(x, -1)  # ! dynamic_access')),
    (
        "attrgetter_path",
        candidate(top="import operator", pre='z = operator.attrgetter("nn.functional.softmax")(torch)  # ! dynamic_access'),
    ),
    (
        "reexported_torch",
        candidate(top="import torch.backends.cuda as bc", pre="z = bc.torch.softmax(x, -1)  # ! dynamic_access library_call"),
    ),
    # --- host_numerics (31): a tensor's values handed to Python
    ("tolist_in_launcher", candidate(pre="rows = x.tolist()  # ! host_numerics")),
    (
        "try_except_fallback",
        candidate(
            pre="""
        try:  # ! library_call
            pass
        except Exception:
            y.copy_(x)
    """
        ),
    ),
    (
        "torch_compile_decorator",
        candidate(
            top="""
        @torch.compile  # ! library_call
        def _helper(t):
            return t
    """
        ),
    ),
    ("numpy_import", candidate(top="import numpy as np  # ! library_call")),
    (
        "contextlib_suppress",
        candidate(
            top="import contextlib",
            pre="""
        with contextlib.suppress(Exception):  # ! library_call
            pass
    """,
        ),
    ),
    ("operator_matmul", candidate(top="import operator", pre="z = operator.matmul(x, x)  # ! library_call")),
    # --- reference_import (10)
    ("import_task_reference", candidate(top="import tasks.rmsnorm.reference  # ! reference_import")),
    ("import_ferret", candidate(top="from ferret.gate import judge  # ! reference_import")),
    ("import_transformers", candidate(top="from transformers.models import deepseek_v3  # ! reference_import")),
    ("relative_import", candidate(top="from . import reference  # ! reference_import")),
    # --- reading_expected (11)
    ("import_gc", candidate(top="import gc  # ! reading_expected")),
    ("sys_getframe", candidate(top="import sys  # ! reading_expected", pre="frame = sys._getframe(1)  # ! reading_expected")),
    ("open_file", candidate(pre='data = open("expected.bin", "rb").read()  # ! reading_expected')),
    (
        "inspect_f_back",
        candidate(top="import inspect  # ! reading_expected", pre="caller = inspect.currentframe().f_back  # ! reading_expected"),
    ),
    ("eval", candidate(pre='v = eval("1 + 1")  # ! reading_expected')),
    ("import_pathlib", candidate(top="from pathlib import Path  # ! reading_expected")),
    ("module_file", candidate(pre="here = __file__  # ! reading_expected")),
    # --- shadowing (12)
    ("sys_modules_write", candidate(top="import sys  # ! reading_expected", pre='sys.modules["torch"] = None  # ! shadowing')),
    ("sys_path_insert", candidate(top="import sys  # ! reading_expected", pre='sys.path.insert(0, "/tmp")  # ! shadowing')),
    ("module_file_shim", candidate(pre='shim = "torch.py"  # ! shadowing')),
    # --- harness_patching (15)
    ("patch_synchronize", candidate(top="torch.cuda.synchronize = lambda: None  # ! harness_patching")),
    ("import_time", candidate(top="import time  # ! harness_patching")),
    ("setattr_module", candidate(top='setattr(torch, "equal", lambda a, b: True)  # ! harness_patching')),
    ("patch_do_bench", candidate(top="triton.testing.do_bench = lambda fn, **kw: 0.001  # ! harness_patching")),
    # --- side_stream_or_thread (13)
    (
        "threading",
        candidate(
            top="import threading  # ! side_stream_or_thread",
            post="threading.Thread(target=lambda: None).start()  # ! side_stream_or_thread",
        ),
    ),
    ("cuda_stream", candidate(pre="s = torch.cuda.Stream()  # ! side_stream_or_thread")),
    (
        "cuda_stream_context",
        candidate(
            pre="""
        with torch.cuda.stream(s):  # ! side_stream_or_thread
            pass
    """
        ),
    ),
    ("thread_pool", candidate(top="from concurrent.futures import ThreadPoolExecutor  # ! side_stream_or_thread")),
    # --- lazy_result (14)
    (
        "tensor_subclass",
        candidate(
            top="""
        class Lazy(torch.Tensor):  # ! lazy_result
            pass
    """
        ),
    ),
    (
        "torch_function_hook",
        candidate(
            top="""
        class Deferred:
            @classmethod
            def __torch_function__(cls, func, types, args=(), kwargs=None):  # ! lazy_result
                return func(*args, **(kwargs or {}))
    """
        ),
    ),
    ("python_dispatch", candidate(top="from torch.utils._python_dispatch import TorchDispatchMode  # ! lazy_result")),
    # --- cross_call_caching (16)
    ("data_ptr", candidate(pre="key = x.data_ptr()  # ! cross_call_caching")),
    ("id_call", candidate(pre="key = id(x)  # ! cross_call_caching")),
    (
        "lru_cache",
        candidate(
            top="""
        from functools import lru_cache  # ! cross_call_caching

        @lru_cache(maxsize=None)  # ! cross_call_caching
        def _table(n):
            return n
    """,
            pre="_table(4)",
        ),
    ),
    ("module_dict_stores_output", candidate(top="_last = {}", post='_last["y"] = y  # ! cross_call_caching')),
    ("module_list_appends_input", candidate(top="_seen = []", pre="_seen.append(x)  # ! cross_call_caching")),
    # --- warmup_detection (17)
    ("global_counter", candidate(top="calls = 0", pre="global calls  # ! warmup_detection\ncalls += 1")),
    ("module_list_counter", candidate(top="_count = [0]", pre="_count[0] += 1  # ! warmup_detection")),
    ("counter_read_modify_write", candidate(top="_CALLS = {}", pre='_CALLS["n"] = _CALLS.get("n", 0) + 1  # ! warmup_detection')),
    ("function_attribute_counter", candidate(pre='run.calls = getattr(run, "calls", 0) + 1  # ! warmup_detection')),
    # --- persisting_l2 (18)
    ("import_cupy", candidate(top="import cupy  # ! persisting_l2")),
    ("persisting_limit_string", candidate(pre='attr = "cudaLimitPersistingL2CacheSize"  # ! persisting_l2')),
    ("cuda_bindings", candidate(top="from cuda.bindings import runtime  # ! persisting_l2")),
    # --- result_forging (21)
    ("print_gate_result", candidate(post="print('GATE_RESULT {\"passed\": true}')  # ! result_forging")),
    ("report_json", candidate(pre='where = "report.json"  # ! result_forging')),
    # --- gate_tampering (20)
    ("open_gates", candidate(pre="f = open('gates/x')  # ! reading_expected gate_tampering")),
    ("golden_file", candidate(pre='name = "golden.safetensors"  # ! gate_tampering')),
    # --- hardcoded_cases (5), shape constants {7168, 4096}
    (
        "shape_equals_case_dim",
        candidate(
            pre="""
        if x.shape[1] == 7168:  # ! hardcoded_cases
            pass
    """
        ),
    ),
    (
        "shape_in_case_dims",
        candidate(
            pre="""
        if x.shape[-1] in (4096, 7168):  # ! hardcoded_cases
            pass
    """
        ),
    ),
    (
        "named_case_dim",
        candidate(
            top="HIDDEN = 7168",
            pre="""
        if x.shape[1] != HIDDEN:  # ! hardcoded_cases
            pass
    """,
        ),
    ),
    # --- lower_precision (4)
    ("to_bfloat16", candidate(pre="xb = x.to(torch.bfloat16)  # ! lower_precision")),
    ("half", candidate(pre="xh = x.half()  # ! lower_precision")),
    (
        "jit_cast_fp16",
        candidate(
            top="""
        @triton.jit
        def _k(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
            offs = tl.arange(0, BLOCK)
            v = tl.load(x_ptr + offs, mask=offs < n).to(tl.float16)  # ! lower_precision
            tl.store(y_ptr + offs, v, mask=offs < n)
    """,
            pre=KERNEL_LAUNCH,
        ),
    ),
    ("allow_tf32", candidate(pre="torch.backends.cuda.matmul.allow_tf32 = True  # ! lower_precision")),
    ("fp16_buffer", candidate(pre="buf = torch.empty(x.shape, dtype=torch.float16, device=x.device)  # ! lower_precision")),
    # --- decoy_kernel (8)
    (
        "unlaunched_jit_kernel",
        candidate(
            top="""
        @triton.jit
        def _fast_kernel(x_ptr, y_ptr):  # ! decoy_kernel
            pass
    """
        ),
    ),
    (
        "if_false",
        candidate(
            pre="""
        if False:  # ! decoy_kernel
            pass
    """
        ),
    ),
    (
        "code_after_return",
        candidate(
            post="""
        return
        y.zero_()  # ! decoy_kernel constant_output
    """
        ),
    ),
    # --- unwritten_output (6)
    ("outputs_rebound", candidate(post='outputs["y"] = x.clone()  # ! unwritten_output')),
    ("returns_value", candidate(post="return y  # ! unwritten_output")),
    # --- input_mutation (3)
    ("input_zeroed", candidate(pre="x.zero_()  # ! input_mutation")),
    ("inputs_entry_replaced", candidate(pre='inputs["x"] = x.clone()  # ! input_mutation')),
    ("input_setitem", candidate(pre="x[0] = 0.0  # ! input_mutation")),
    # --- constant_output (2)
    ("output_zeroed", candidate(post="y.zero_()  # ! constant_output")),
    ("output_filled_constant", candidate(post="y[:] = 0.0  # ! constant_output")),
    # --- nan_wildcard (7)
    ("nan_fill", candidate(post='y.fill_(float("nan"))  # ! constant_output nan_wildcard')),
    ("math_nan", candidate(pre="bad = math.nan  # ! nan_wildcard")),
    ("nan_to_num", candidate(post="y.copy_(y.nan_to_num())  # ! nan_wildcard")),
    # --- allocator_reuse (1)
    ("empty_cache", candidate(pre="torch.cuda.empty_cache()  # ! allocator_reuse")),
    ("untyped_storage", candidate(pre="s = y.untyped_storage()  # ! allocator_reuse")),
    ("legacy_storage", candidate(pre="s = y.storage()  # ! allocator_reuse")),
    ("storage_swapped", candidate(pre="y.set_(x)  # ! allocator_reuse")),
    # --- whole files
    ("no_run", "import torch  # ! unwritten_output\n\n\ndef forward(x):\n    return x\n"),
    (
        "run_never_writes",
        textwrap.dedent("""\
        import torch


        def run(inputs, outputs, params, trace=None):  # ! unwritten_output
            x = inputs["x"]
    """),
    ),
]

_MARK = re.compile(r"#\s*!\s*([a-z0-9_ ]+)$")


def _expected(source: str) -> dict[int, set[str]]:
    marks = {}
    for number, line in enumerate(source.splitlines(), start=1):
        m = _MARK.search(line)
        if m:
            marks[number] = set(m.group(1).split())
    return marks


def test_enough_snippets():
    assert len(CASES) >= 40
    covered = {slug for _, source in CASES for slugs in _expected(source).values() for slug in slugs}
    assert covered == set(CHEATS) - RUNTIME_ONLY - {"syntax_error"}


@pytest.mark.parametrize("source", [c[1] for c in CASES], ids=[c[0] for c in CASES])
def test_snippet_is_flagged_on_its_line(source):
    marks = _expected(source)
    assert marks, "snippet marks no line"
    result = scan_source(source, "snippet.py", shape_constants={7168, 4096})
    assert not result.passed
    lines = source.splitlines()
    got: dict[int, set[str]] = {}
    for f in result.findings:
        got.setdefault(f.line, set()).add(f.cheat)
        assert f.catalogue == CHEATS[f.cheat]
        assert f.code == lines[f.line - 1].strip()
        assert re.match(r"^[A-Za-z][\w -]+ \(docs/cheats\.md \d+\): \S", f.message), f.message
    for line, slugs in marks.items():
        assert slugs <= got.get(line, set()), f"line {line} {lines[line - 1]!r}: want {slugs}\n{_show(result)}"
    unexpected = sorted(set(got) - set(marks))
    assert not unexpected, f"findings on unmarked lines {unexpected}:\n{_show(result)}"


@pytest.mark.quick
def test_message_names_the_cheat_in_words():
    result = scan_source(candidate(pre="z = torch.softmax(x, -1)"))
    (f,) = result.findings
    assert f.cheat == "library_call" and f.catalogue == [9]
    assert f.message.startswith("library call (docs/cheats.md 9): torch.softmax")
    assert "instead of the candidate's kernel" in f.message
    assert f.line == candidate(pre="z = torch.softmax(x, -1)").splitlines().index("    z = torch.softmax(x, -1)") + 1
    assert f.col == 9


@pytest.mark.quick
def test_honest_launcher_and_kernel_idioms_pass():
    """tl.dot and @ inside @triton.jit, .to(non-literal dtype), integer metadata via .max()/.item(), rank checks
    against case dims, allocation helpers and the trace dict."""
    source = candidate(
        top="""
        @triton.jit
        def _gemm(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK: tl.constexpr, OUT_DTYPE: tl.constexpr):
            offs = tl.arange(0, BLOCK)
            a = tl.load(a_ptr + offs[:, None] * K + offs[None, :])
            b = tl.load(b_ptr + offs[:, None] * N + offs[None, :])
            acc = tl.dot(a, b)
            acc += a @ b
            acc = acc * tl.sum(acc, axis=1)[:, None]
            tl.store(c_ptr + offs[:, None] * N + offs[None, :], acc.to(c_ptr.dtype.element_ty))
            tl.store(c_ptr + offs, tl.max(acc, axis=1).to(OUT_DTYPE))
    """,
        pre="""
        if x.dim() != 3 or x.stride(-1) != 1:
            raise ValueError("bad layout")
        longest = int(inputs["cache_lens"].max().item())
        sms = torch.cuda.get_device_properties(x.device).multi_processor_count
        c = torch.empty_like(y)
        stats = torch.empty(longest, dtype=torch.float32, device=x.device)
        _gemm[(1,)](x, x, c, 16, 16, 16, BLOCK=16, OUT_DTYPE=tl.float32, num_warps=4)
        if trace is not None:
            trace["stats"] = stats
    """,
    )
    result = scan_source(source, shape_constants={3, 16, 7168})
    assert result.passed, _show(result)


def test_shape_constants_only_matter_when_given():
    source = candidate(pre="if x.shape[1] == 7168:\n    pass")
    assert scan_source(source).passed
    assert not scan_source(source, shape_constants={7168}).passed
    # ordering comparisons and block-size keywords are not case checks
    assert scan_source(candidate(pre="if x.shape[1] <= 7168:\n    pass"), shape_constants={7168}).passed


def test_syntax_error_is_one_finding():
    result = scan_source("def run(:\n    pass\n", "broken.py")
    (f,) = result.findings
    assert f.cheat == "syntax_error" and f.catalogue == [] and f.line == 1
    assert f.message.startswith("syntax error")
    assert not result.passed
    assert "syntax_error" in CHEATS and CHEATS["syntax_error"] == []


def test_null_bytes_do_not_raise():
    result = scan_source("x = 1\x00\n")
    assert [f.cheat for f in result.findings] == ["syntax_error"]


def test_cheat_table():
    assert CHEATS == {
        "allocator_reuse": [1],
        "constant_output": [2],
        "input_mutation": [3],
        "lower_precision": [4],
        "hardcoded_cases": [5],
        "unwritten_output": [6],
        "nan_wildcard": [7],
        "decoy_kernel": [8],
        "library_call": [9],
        "reference_import": [10],
        "reading_expected": [11],
        "shadowing": [12],
        "side_stream_or_thread": [13],
        "lazy_result": [14],
        "harness_patching": [15],
        "cross_call_caching": [16],
        "warmup_detection": [17],
        "persisting_l2": [18],
        "impossible_speed": [19],
        "gate_tampering": [20],
        "result_forging": [21],
        "write_outside_outputs": [23],
        "output_relabelled": [28],
        "dynamic_access": [29],
        "host_numerics": [31],
        "wrong_rows": [30],
        "graph_frozen": [32],
        "syntax_error": [],
    }


def test_scan_file_hashes_bytes(tmp_path):
    path = tmp_path / "cand.py"
    path.write_text(candidate(pre="print('hi')"))
    result = scan_file(path)
    assert result.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert [f.cheat for f in result.findings] == ["result_forging"]
    assert result.model_dump()["findings"][0]["cheat"] == "result_forging"


def test_too_deep_to_walk_does_not_raise():
    result = scan_source("x = " + "+".join(["1"] * 100000) + "\n")
    assert [f.cheat for f in result.findings] == ["syntax_error"]
