"""Checks on one machine share its GPU: their correctness work runs side by side, their timing alone.

A timing guard reads the GPU's time between events and the wall time of a synchronized batch of calls; another
process's kernels on the same GPU slow both, and hidden work looks just like them. Three pytest workers sharing one
H200 made an honest rope kernel read 150-156 us of synchronized wall time per call against 72 us of event time in
each of three tries, and the judge named it `side_stream_or_thread`. So a check's timing takes
the GPU alone among ferret's checks: a reader-writer lock on the GPU, where a check's GPU work (the candidate's
correctness and stress run) holds it shared and its timed rounds hold it exclusively.

The lock is two `flock`s on files in one folder per GPU (the kernel gives a lock back when its holder ends, however
it ends, so a crashed check holds no one up):
  - `turnstile`: a timing takes it exclusively first, so that checks arriving while it waits queue behind it (a
    stream of shared holders would otherwise keep it waiting for ever); a shared holder passes through it;
  - `gpu`: held shared by GPU work, exclusively by timing.
Locks are per open file, so threads of one process (a dispatch's proposals) take turns like processes do. A holder
must never ask for the other kind while it holds one: that would wait for itself.

What it does not cover: processes other than ferret checks on the same GPU (the reference timer's interference
probe sees them), the timing processes' own warm-up (short, and overlapping their check's correctness run by
design), and one GPU reached under two names (two CUDA_VISIBLE_DEVICES spellings of it).
"""

from __future__ import annotations

import fcntl
import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

TURNS_DIR_ENV = "FERRET_GPU_TURNS_DIR"


def gpu_key() -> str:
    """The GPU a process's checks use: the first of CUDA_VISIBLE_DEVICES (device 0 of what it sees), "0" without it."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in visible) or "0"


class GpuTurns:
    """The reader-writer lock on one GPU, in `folder` (made if missing)."""

    def __init__(self, folder: Path, key: str):
        self.folder = Path(folder)
        self.turnstile_path = self.folder / f"gpu-{key}.turnstile"
        self.gpu_path = self.folder / f"gpu-{key}.lock"

    @classmethod
    def for_this_process(cls) -> GpuTurns:
        """The lock of the GPU this process uses, in $FERRET_GPU_TURNS_DIR or the temporary folder's ferret-gpu-turns
        (one for every check of the machine)."""
        folder = os.environ.get(TURNS_DIR_ENV) or os.path.join(tempfile.gettempdir(), "ferret-gpu-turns")
        return cls(Path(folder), gpu_key())

    def _open(self, path: Path) -> int:
        self.folder.mkdir(parents=True, exist_ok=True)
        return os.open(path, os.O_RDWR | os.O_CREAT, 0o666)

    @contextmanager
    def shared(self) -> Iterator[float]:
        """Hold the GPU beside other GPU work, behind any timing already waiting. Yields the seconds waited."""
        waiting = time.perf_counter()
        turnstile, gpu = self._open(self.turnstile_path), self._open(self.gpu_path)
        try:
            fcntl.flock(turnstile, fcntl.LOCK_SH)  # passes at once unless a timing holds or waits on it
            fcntl.flock(gpu, fcntl.LOCK_SH)
            fcntl.flock(turnstile, fcntl.LOCK_UN)
            yield time.perf_counter() - waiting
        finally:
            os.close(gpu)  # closing gives the locks back
            os.close(turnstile)

    @contextmanager
    def alone(self) -> Iterator[float]:
        """Hold the GPU alone: wait for the shared holders of the moment, keep new ones out. Yields the seconds
        waited."""
        waiting = time.perf_counter()
        turnstile, gpu = self._open(self.turnstile_path), self._open(self.gpu_path)
        try:
            fcntl.flock(turnstile, fcntl.LOCK_EX)
            fcntl.flock(gpu, fcntl.LOCK_EX)
            yield time.perf_counter() - waiting
        finally:
            os.close(gpu)
            os.close(turnstile)
