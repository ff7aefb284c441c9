"""Faults of the machine, told from faults of the candidate: a full disk, the judge's own process out of memory,
a GPU that was lost. They are errors of the run (`ferret.errors.MachineFault`, exit 5): nothing is recorded
against the candidate, and the message says what to free or fix before the check runs again.

A candidate can print or raise any text it likes, so text alone never makes a machine fault: a full disk counts
only where the harness, not the candidate, met it (no frame of the candidate's file in the traceback) or where
the judge finds the disk short itself, and not where the candidate's own files filled it; a lost GPU counts only
where the judge's own process finds the GPU gone too. Before a check writes anything, `require_disk` says when
the folders it writes cannot hold what it will write (an estimate from the gate's case sizes).
"""

from __future__ import annotations

import errno
import math
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

from ferret import wire
from ferret.bench.guards import l2_bytes_of
from ferret.contract.model import Contract, ProfileName
from ferret.contract.shapes import evaluate_shape
from ferret.errors import MachineFault
from ferret.gate.context import GateContext
from ferret.gate.inputs import resolve_dtype
from ferret.sandbox.launch import FALLBACK_FILE_NAME

# What a full disk says: the OS's words (errno 28, and 122 for a full quota), safetensors' and Python's.
DISK_FULL = re.compile(r"No space left on device|\[Errno 28\]|ENOSPC|Disk quota exceeded|\[Errno 122\]|EDQUOT")
# What a GPU gone from under a process says: the CUDA runtime's and driver's errors, NVML's, the kernel log's Xid.
GPU_LOST = re.compile(
    r"cudaErrorDevicesUnavailable|CUDA_ERROR_DEVICE_UNAVAILABLE|busy or unavailable|cudaErrorNoDevice|"
    r"no CUDA-capable device is detected|GPU is lost|GPU_IS_LOST|fallen off the bus|device (?:has been |was |is )?lost|"
    r"\bXid\b|cudaErrorDeviceUninitialized|CUDA_ERROR_NOT_INITIALIZED"
)
# Free bytes under which a folder is short, whatever the check's estimate (the judge's own small files need room).
FREE_FLOOR = 64 << 20
# Bytes the candidate may write in its own folder (its compile cache, temporary files) beyond the judge's inputs and
# its results: past this, a full disk is the candidate's own doing and stays charged to it.
CANDIDATE_WRITES_CEILING = 1 << 30
# How the judge's process tells the size of a folder's free space (`shutil.disk_usage`); tests stand in for it.
disk_usage = shutil.disk_usage


def _frames(traceback: str | None) -> list[str]:
    """The files of a Python traceback's frames, in order."""
    return re.findall(r'File "([^"]+)", line \d+', traceback or "")


def raised_by_harness(traceback: str | None, candidate_file: str = FALLBACK_FILE_NAME) -> bool:
    """Whether a failure came from the harness's own work (saving the results, say), with no frame of the
    candidate's file (its copy in its folder, named as `candidate_file_name` names it) on the way: what the
    candidate raises carries its frames."""
    frames = _frames(traceback)
    return bool(frames) and not any(Path(f).name == candidate_file for f in frames)


def disk_short(folder: Path) -> bool:
    """Whether the filesystem of `folder` has less than FREE_FLOOR free now."""
    try:
        return disk_usage(folder).free < FREE_FLOOR
    except OSError:
        return False


def candidate_written_bytes(workdir: Path) -> int:
    """Bytes in the candidate's folder outside the judge's inputs (`in/`) and the results (`out/`)."""
    total = 0
    for root, dirs, files in os.walk(workdir):
        if Path(root) == workdir:
            dirs[:] = [d for d in dirs if d not in ("in", "out")]
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                continue
    return total


def gpu_lost() -> bool:
    """Whether this process (the judge's) finds the GPU gone too: none visible, or a one-entry op on it fails."""
    try:
        if not torch.cuda.is_available():
            return True
        torch.ones(1, device="cuda").add_(1)
        torch.cuda.synchronize()
        return False
    except Exception:  # noqa: BLE001 - any failure to use the device is the answer
        return True


@dataclass(frozen=True)
class RunEvidence:
    """What a candidate's run left, as the machine-fault test reads it: each failed step's text and traceback."""

    texts: Mapping[str, tuple[str, str | None]]  # step (a variant's id, or "stress") -> (message, traceback)
    workdir: Path
    device: str
    candidate_file: str = FALLBACK_FILE_NAME  # the candidate's copy in workdir, whose frames are the candidate's


def evidence_of(
    statuses: Mapping[str, wire.VariantStatus | None],
    stress: wire.StressResult | None,
    workdir: Path,
    device: str,
    candidate_file: str = FALLBACK_FILE_NAME,
) -> RunEvidence:
    texts = {
        vid: (s.message, s.traceback)
        for vid, s in statuses.items()
        if s is not None and not s.ok and s.kind != wire.FailureKind.NOT_RUN
    }
    if stress is not None and stress.error:
        texts = {**texts, "stress": (stress.error, None)}
    return RunEvidence(texts, workdir, device, candidate_file)


def machine_fault_in(run: RunEvidence, lost: Callable[[], bool] = gpu_lost) -> MachineFault | None:
    """The machine fault a candidate's run met, if the judge can confirm one (the module's docstring says how);
    None where the failures are the candidate's."""
    for step, (message, traceback) in run.texts.items():
        text = f"{message}\n{traceback or ''}"
        if DISK_FULL.search(text) and (raised_by_harness(traceback, run.candidate_file) or disk_short(run.workdir)):
            written = candidate_written_bytes(run.workdir)
            if written <= CANDIDATE_WRITES_CEILING:
                return MachineFault(
                    f"the disk holding {run.workdir.parent} filled up during the candidate's run ({step}: "
                    f"{_line_of(text, DISK_FULL)})",
                    retry=f"free space there (or point TMPDIR at a larger disk) and run the check again; "
                    f"{_free_text(run.workdir.parent)}",
                )
        if run.device == "cuda" and GPU_LOST.search(text) and lost():
            return MachineFault(
                f"the GPU was lost during the candidate's run ({step}: {_line_of(text, GPU_LOST)}), and the judge's "
                "process cannot use it either",
                retry="check the GPU (nvidia-smi, the kernel log's Xid lines), reset or replace it, and run the check again",
            )
    return None


def _line_of(text: str, pattern: re.Pattern[str]) -> str:
    """The line of `text` that `pattern` matched, shortened."""
    found = next((line.strip() for line in text.splitlines() if pattern.search(line)), "")
    return found[:200]


def _free_text(folder: Path) -> str:
    try:
        return f"{_size(disk_usage(folder).free)} free there now"
    except OSError:
        return "its free space unknown"


def _size(nbytes: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(nbytes) < 1024 or unit == "GiB":
            return f"{nbytes:.0f} {unit}" if unit == "B" else f"{nbytes:.1f} {unit}"
        nbytes /= 1024
    return f"{nbytes:.1f} GiB"  # pragma: no cover - the loop returns


def _is_disk_full(err: BaseException) -> bool:
    if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    return bool(DISK_FULL.search(f"{type(err).__name__}: {err}")) and type(err).__name__ in ("SafetensorError", "OSError")


@contextmanager
def machine_faults(device: str, lost: Callable[[], bool] = gpu_lost) -> Iterator[None]:
    """The judge's own faults of the machine, as MachineFault: a full disk where it writes, its own process out of
    host memory or GPU memory, a GPU its own process lost. Everything else passes through as it was."""
    try:
        yield
    except MachineFault:
        raise
    except MemoryError as err:
        raise MachineFault(
            f"the judge's own process ran out of host memory ({type(err).__name__})",
            retry="free host memory (other checks, other programs) and run the check again",
        ) from err
    except torch.OutOfMemoryError as err:
        raise MachineFault(
            f"the judge's own process ran out of GPU memory ({str(err)[:200]})",
            retry="let the other processes on the GPU finish (nvidia-smi lists them) and run the check again",
        ) from err
    except Exception as err:
        if _is_disk_full(err):
            raise MachineFault(
                f"the judge could not write: {type(err).__name__}: {str(err)[:200]}",
                retry=f"free space on the disk it names (the gates folder, or TMPDIR: {tempfile.gettempdir()}) and "
                "run the check again",
            ) from err
        if device == "cuda" and GPU_LOST.search(str(err)) and lost():
            raise MachineFault(
                f"the judge's process lost the GPU: {type(err).__name__}: {str(err)[:200]}",
                retry="check the GPU (nvidia-smi, the kernel log's Xid lines), reset or replace it, and run the check again",
            ) from err
        raise


# --- the disk a check will write ------------------------------------------------------------------------------


def _nbytes(shape: tuple[int, ...], dtype: torch.dtype) -> int:
    return math.prod(shape) * torch.empty((), dtype=dtype).element_size()


def _variant_bytes(contract: Contract, dims: Mapping[str, int], dtype: str, golden: int) -> int:
    """What one variant puts in the candidate's folder: its inputs, and its results file (the outputs of every
    repeat, the call on moved inputs where there is one, the traced and the no-op run; the in-place inputs of every
    repeat; the read-only inputs up to 16 MiB as the first call left them; the traced stages, at most half the float64
    golden file)."""
    inputs = {
        i.name: (i.role, _nbytes(evaluate_shape(i.shape, dict(dims)), resolve_dtype(i.dtype, dtype))) for i in contract.inputs
    }
    outputs = sum(_nbytes(evaluate_shape(o.shape, dict(dims)), resolve_dtype(o.dtype, dtype)) for o in contract.outputs)
    repeats = contract.budgets.determinism_repeats
    in_place = sum(n for role, n in inputs.values() if role == "inout")
    read_back = sum(n for role, n in inputs.values() if role == "in" and n <= (16 << 20))
    return sum(n for _, n in inputs.values()) + outputs * (repeats + 3) + in_place * repeats + read_back + golden // 2


def _fresh_bytes(contract: Contract, profile: ProfileName, largest: Mapping[str, int]) -> int:
    """The fresh cases of one check: `cases.fresh.count` uniform ones at the top of the fresh ranges, one for each
    stratum at their middle (strata cases draw the dims no stratum sets in the lower half), golden stages beside."""
    fresh = contract.cases.fresh
    ranges = getattr(fresh, profile) if fresh is not None else {}
    if fresh is None or not ranges:
        return 0
    top = {**largest, **{d: high for d, (_, high) in ranges.items()}}
    middle = {**largest, **{d: (low + high) // 2 for d, (low, high) in ranges.items()}}
    dtype = contract.primary_dtype
    return fresh.count * _variant_bytes(contract, top, dtype, 0) + len(contract.strata(profile)) * _variant_bytes(
        contract, middle, dtype, 0
    )


def check_writes(context: GateContext, device: str, timed: bool) -> dict[Path, int]:
    """An estimate of the bytes a check writes, by folder: the candidate's folder and the timing processes'
    (under TMPDIR) and the verdict (in the gate's folder). The timed input pool counts twice the larger of 2 x L2
    and two input sets, per timed case."""
    contract, gate, profile = context.contract, context.gate, context.manifest.profile
    temp = 0
    for record in context.manifest.variants:
        golden = gate / record.golden_file
        temp += _variant_bytes(contract, record.dims, record.dtype, golden.stat().st_size if golden.exists() else 0)
    largest = max(context.manifest.variants, key=lambda r: r.inputs.nbytes, default=None)
    temp += _fresh_bytes(contract, profile, largest.dims if largest is not None else {})
    if device == "cuda" and timed:
        l2 = l2_bytes_of(device)
        primary = [r for r in context.manifest.variants if r.dtype == contract.primary_dtype and r.part == "correctness"]
        temp += sum(2 * max(2 * l2, 2 * r.inputs.nbytes) for r in primary)
    return {Path(tempfile.gettempdir()): temp, gate: 1 << 20}


def require_disk(context: GateContext, device: str, timed: bool) -> None:
    """Refuse a check, before it writes anything, where a folder it writes has less free space than the check's
    estimate (`check_writes`) plus FREE_FLOOR: MachineFault naming the folder, what it needs and what is free."""
    needed: dict[int, tuple[Path, int]] = {}
    for folder, nbytes in check_writes(context, device, timed).items():
        try:
            device_id = os.stat(folder).st_dev
        except OSError:
            continue
        first, total = needed.get(device_id, (folder, 0))
        needed[device_id] = (first, total + nbytes)
    for folder, nbytes in needed.values():
        free = disk_usage(folder).free
        if free < nbytes + FREE_FLOOR:
            raise MachineFault(
                f"not enough disk for this check: {folder} has {_size(free)} free, and the check writes about "
                f"{_size(nbytes)} there (an estimate from the gate's case sizes) and keeps {_size(FREE_FLOOR)} spare",
                retry="free space there (or point TMPDIR, or --gates-dir, at a larger disk) and run the check again",
            )
