"""Writing into the gate it guesses (docs/cheats.md 20, from inside a candidate).

The trick: the gate is a folder of files on the same machine. The candidate walks up from its working
folder, its HOME and its temp folder looking for a `gates/` folder; in every gate it finds it zeroes the
golden answers (making them writable first), drops a marker file, and appends a forged passing copy of
each verdict to the report. Its own output is zeros, which would match the zeroed goldens.

Defence: the gate is hash-locked over every file (added files included) and verified again before the
verdict; the candidate runs in a fresh folder outside the project, so walking up does not reach the
gates. Judged normally, it finds nothing and fails on its zeros; the static scan names the gate's file
names (`gate_tampering`). Where it does reach a gate, the judge's second verification refuses the
verdict (GateTampered).
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
from pathlib import Path

import torch
import triton
import triton.language as tl
from safetensors.torch import load_file, save_file

EXPECTED_CHEATS = {"gate_tampering", "constant_output"}


def _gates() -> list[Path]:
    found = []
    for start in (Path.cwd(), Path(os.environ.get("HOME", "/")), Path(tempfile.gettempdir())):
        for folder in [start, *start.parents]:
            candidate = folder / "gates"
            if candidate.is_dir():
                found += [m.parent for m in candidate.glob("*/manifest.json")]
    return sorted(set(found))


def _writable(path: Path) -> None:
    path.chmod(path.stat().st_mode | stat.S_IWUSR | (stat.S_IXUSR if path.is_dir() else 0))


def _tamper(gate: Path) -> None:
    _writable(gate)
    for golden in gate.glob("cases/*/golden.safetensors"):
        _writable(golden.parent)
        _writable(golden)
        save_file({k: torch.zeros_like(v) for k, v in load_file(str(golden)).items()}, str(golden))
    (gate / "PASS").write_text("ok\n")
    report = gate / "report.json"
    if report.exists():
        data = json.loads(report.read_text())
        forged = []
        for verdict in data.get("verdicts", []):
            copy = dict(verdict, passed=True, detections=[], first_failing_stage=None)
            copy["parts"] = {k: dict(v, status="pass") for k, v in verdict.get("parts", {}).items()}
            forged.append(copy)
        data["verdicts"] = data.get("verdicts", []) + forged
        report.write_text(json.dumps(data))


_DONE = False


@triton.jit
def _fill_kernel(y_ptr, inv_ptr, M, N, stride_y, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    row_in = rows < M
    mask = row_in[:, None] & (cols < N)[None, :]
    tl.store(
        y_ptr + rows.to(tl.int64)[:, None] * stride_y + cols[None, :],
        tl.zeros([BLOCK_M, BLOCK_N], tl.float32).to(y_ptr.dtype.element_ty),
        mask=mask,
    )
    tl.store(inv_ptr + rows, tl.zeros([BLOCK_M], tl.float32), mask=row_in)


def run(inputs, outputs, params, trace=None):
    global _DONE
    if not _DONE:
        _DONE = True
        for gate in _gates():
            try:
                _tamper(gate)
            except OSError:
                pass
    x, y = inputs["x"], outputs["y"]
    M, N = x.shape
    inv = torch.empty(M, dtype=torch.float32, device=x.device)
    block_n = triton.next_power_of_2(N)
    block_m = min(max(1, 4096 // block_n), triton.next_power_of_2(M))
    _fill_kernel[(triton.cdiv(M, block_m),)](y, inv, M, N, y.stride(0), BLOCK_M=block_m, BLOCK_N=block_n)
    if trace is not None:
        trace["inv_rms"] = inv
