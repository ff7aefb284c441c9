"""A probe, not a cheat: on its first call it records everything a candidate could read to tell a judged call
from a production one (`import` the file, call `run`), into `probe-record.json` in its working folder, then
computes rmsnorm honestly. `tests/adversarial/test_judged_call_tells.py` runs it under the judge and in a plain
import-and-call and requires the two records to agree, but for the CPU profile's known tells (SECURITY.md).

What a cheater would branch on: the module's name, `sys.argv`, the environment, the launch entry points (their
type, names, module, attributes, code), the harness's modules in `sys.modules`, copies of itself there, how
many calls came before its first, and the paths it lives among (its file's folder, the working folder, HOME,
TMPDIR, the temp folder, Triton's cache folder, the user's name: torch's compile cache is derived from the last two).
"""

from __future__ import annotations

import getpass
import json
import os
import sys
import tempfile

import torch
import triton
import triton.language as tl

EXPECTED_CHEATS = {"reading_expected"}  # it reads the interpreter's state: the static scan says so

RECORD = "probe-record.json"
_CALLS = [0]


@triton.jit
def _rmsnorm_kernel(x_ptr, w_ptr, y_ptr, inv_ptr, M, N, stride_x, stride_y, eps, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    row_in = rows < M
    col_in = cols < N
    mask = row_in[:, None] & col_in[None, :]
    rows64 = rows.to(tl.int64)
    x = tl.load(x_ptr + rows64[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=col_in, other=0.0).to(tl.float32)
    inv = tl.rsqrt(tl.sum(x * x, axis=1) / N + eps)
    tl.store(
        y_ptr + rows64[:, None] * stride_y + cols[None, :], (x * inv[:, None] * w[None, :]).to(y_ptr.dtype.element_ty), mask=mask
    )
    tl.store(inv_ptr + rows, inv, mask=row_in)


def describe(function) -> dict:
    """What introspection says of a function: who it claims to be, and whether it is a wrapper."""
    code = getattr(function, "__code__", None)
    return {
        "type": type(function).__name__,
        "name": getattr(function, "__name__", None),
        "qualname": getattr(function, "__qualname__", None),
        "module": getattr(function, "__module__", None),
        "wrapped": hasattr(function, "__wrapped__"),
        "attributes": sorted(getattr(function, "__dict__", {})),
        "code": [code.co_name, code.co_qualname, code.co_filename] if code is not None else None,
    }


def launch_points() -> dict:
    found = {}
    from triton.runtime.jit import JITFunction

    found["JITFunction.run"] = describe(JITFunction.run)
    try:
        from triton.runtime import interpreter

        found["InterpretedFunction.run"] = describe(interpreter.InterpretedFunction.run)
        found["interpreter._patch_lang"] = describe(interpreter._patch_lang)
        found["GridExecutor.__call__"] = describe(interpreter.GridExecutor.__call__)
    except ImportError:
        pass
    from torch.utils import _python_dispatch

    found["_disable_current_modes"] = describe(_python_dispatch._disable_current_modes)
    return found


def record() -> dict:
    frames, frame = [], sys._getframe(2)
    while frame is not None and len(frames) < 12:
        frames.append(frame.f_globals.get("__name__"))
        frame = frame.f_back
    here = os.path.realpath(__file__)
    return {
        "name": __name__,
        "file": os.path.basename(__file__),
        "argv": list(sys.argv),
        "orig_argv": list(sys.orig_argv[1:]),
        "environment": dict(os.environ),
        "launch_points": launch_points(),
        "frames": frames,
        "copies_of_itself": sorted(
            k for k, m in sys.modules.items() if os.path.realpath(getattr(m, "__file__", "") or "") == here
        ),
        "harness_modules": sorted(k for k in sys.modules if k.split(".")[0] == "ferret"),
        "calls_before": _CALLS[0] - 1,
        "cwd": os.getcwd(),
        "paths": paths(),
    }


def paths() -> dict:
    return {
        "folder": os.path.dirname(os.path.abspath(__file__)),
        "cwd": os.getcwd(),
        "home": os.environ.get("HOME"),
        "expanded_home": os.path.expanduser("~"),
        "tmpdir": os.environ.get("TMPDIR"),
        "gettempdir": tempfile.gettempdir(),
        "triton_cache": triton.knobs.cache.dir,
        "user": getpass.getuser(),
    }


def run(inputs, outputs, params, trace=None):
    _CALLS[0] += 1
    if _CALLS[0] == 1:
        with open(RECORD, "w") as handle:
            json.dump(record(), handle)
    x, w, y = inputs["x"], inputs["weight"], outputs["y"]
    M, N = x.shape
    inv = torch.empty(M, dtype=torch.float32, device=x.device)
    block_n = triton.next_power_of_2(N)
    block_m = min(max(1, 4096 // block_n), triton.next_power_of_2(M))
    _rmsnorm_kernel[(triton.cdiv(M, block_m),)](
        x, w, y, inv, M, N, x.stride(0), y.stride(0), float(params["eps"]), BLOCK_M=block_m, BLOCK_N=block_n
    )
    if trace is not None:
        trace["inv_rms"] = inv
