"""Forging the result channel (docs/cheats.md 21).

The trick: a harness that reads its verdict from the candidate's stdout, from a status file or from a
report in the working folder can be told anything. This candidate prints a `GATE_RESULT {"pass": true}`
line (and a PASS summary) on stdout and stderr at import and on every call, writes a fake
`report.json`, a `GATE_RESULT` file and a `status.json` into its working folder, and pre-writes an
"ok" status for every case into the runner's result folder. Its kernel is sloppy (bfloat16
statistics), so only the forgery could make it pass.

Defence: the verdict is computed and written by the judge process from the tensors alone; it is never
parsed from candidate output. The gate reports `result_forging` (static: printing, GATE_RESULT and
report.json strings), and the judge prints exactly one GATE_RESULT line, its own.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

EXPECTED_CHEATS = {"result_forging"}
EXPECTED_RUNTIME = {"result_forging"}

_FAKE = {
    "pass": True,
    "first_failing_stage": None,
    "parts": {"correctness": "pass", "dtypes": "pass", "edge_cases": "pass", "determinism": "pass", "integrity": "pass"},
    "detections": [],
}


def _forge() -> None:
    line = "GATE_RESULT " + json.dumps(_FAKE)
    print(line, flush=True)
    print(line, file=sys.stderr, flush=True)
    here = Path.cwd()
    (here / "report.json").write_text(json.dumps({"verdicts": [{"passed": True, **_FAKE}]}))
    (here / "GATE_RESULT").write_text(line + "\n")
    (here / "status.json").write_text(json.dumps({"ok": True, "pass": True}))
    try:
        job = json.loads((here / "job.json").read_text())
        out = Path(job["result_dir"])
        out.mkdir(exist_ok=True)
        for variant in job["variants"]:
            (out / f"{variant['id']}.json").write_text(json.dumps({"ok": True, "launches": 1, "aten_compute": {}}))
        (out / "done").write_text("ok")
    except (OSError, ValueError, KeyError):
        pass


_forge()


@triton.jit
def _rmsnorm_kernel(
    x_ptr,
    w_ptr,
    y_ptr,
    inv_ptr,
    M,
    N,
    stride_x,
    stride_y,
    eps,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    STORE_INV: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    row_in = rows < M
    col_in = cols < N
    mask = row_in[:, None] & col_in[None, :]
    rows64 = rows.to(tl.int64)
    x = tl.load(x_ptr + rows64[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=col_in, other=0.0).to(tl.float32)
    inv = tl.rsqrt(tl.sum(x * x, axis=1) / N + eps).to(tl.bfloat16).to(tl.float32)
    tl.store(
        y_ptr + rows64[:, None] * stride_y + cols[None, :], (x * inv[:, None] * w[None, :]).to(y_ptr.dtype.element_ty), mask=mask
    )
    if STORE_INV:
        tl.store(inv_ptr + rows, inv, mask=row_in)


def run(inputs, outputs, params, trace=None):
    x, w, y = inputs["x"], inputs["weight"], outputs["y"]
    M, N = x.shape
    inv = torch.empty(M, dtype=torch.float32, device=x.device)
    block_n = triton.next_power_of_2(N)
    block_m = min(max(1, 4096 // block_n), triton.next_power_of_2(M))
    _rmsnorm_kernel[(triton.cdiv(M, block_m),)](
        x,
        w,
        y,
        inv,
        M,
        N,
        x.stride(0),
        y.stride(0),
        float(params["eps"]),
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        STORE_INV=trace is not None,
    )
    if trace is not None:
        trace["inv_rms"] = inv
    _forge()
