"""The reference timers of a check warm up one at a time: load the baseline, torch.compile it, warm every case.

torch.compile's generated Triton kernels pick their launch configuration by timing candidates on their first call
(inductor's autotuning), and the pick is written to the compile cache that later processes read. Three reference
processes compiling at once on a cold cache picked differently: rope prefill's compiled baseline read 293 us in
one process and 345 us in the other two of the same check, and 345 us in every process of the next checks, which
read the cache (H200). Taking turns, the first process compiles (alone among the
reference processes) and the others load its picks. A warm cache's loads overlap the candidate's correctness run
either way, with less contention for the host's cores.

The turn is an exclusive `flock` on a file in the compile cache's folder: the kernel gives it back when the holder
ends, however it ends, so a reference process that crashes while warming up holds no one up. A holder that warmed
up leaves a mark named by what it warmed up (`warm_up_key`: the baseline's files, the cases, torch's version): with
the mark there the cache holds the picks, and later processes warm up at once, beside each other (five processes
taking turns made the MLA warm check's timing wait 11-12 s for the last one, H200).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path

import torch

from ferret import wire

LOCK_FILE = "warm-up-turn.lock"


def warm_up_key(files: Iterable[Path], described: str) -> str:
    """What a warm-up compiled, as a name: the digest of the files' bytes (in the order given) and a description
    of the rest (the cases' shapes, the compile flag, torch's version)."""
    digest = hashlib.sha256(described.encode())
    for path in files:
        digest.update(path.read_bytes())
    return digest.hexdigest()[:32]


def timing_job_key(job: wire.TimingJob) -> str:
    """What a reference timer warms up: its baseline's files, the cases' output shapes, the compile flag, torch. The
    judge computes it from the same job (`ferret.gate.compile_choice`): one key names the compile cache's picks."""
    files = sorted(Path(job.import_root).rglob("*.py")) if job.import_root else [Path(job.source)]
    cases = [(case.case, sorted(case.outputs.items())) for case in job.cases]
    return warm_up_key(files, json.dumps([job.module, job.entry, job.compile, cases, torch.__version__], default=str))


class WarmUpTurn:
    """One process's turn to warm up `key`, among the processes sharing `folder`; with no folder, always free."""

    def __init__(self, folder: Path | None, key: str = ""):
        self.path = folder / LOCK_FILE if folder is not None else None
        self.mark = folder / f"warmed-{key}" if folder is not None and key else None
        self._fd: int | None = None

    @classmethod
    def for_compile_cache(cls, key: str) -> WarmUpTurn:
        """The turn among the processes sharing this process's torch.compile cache (TORCHINDUCTOR_CACHE_DIR)."""
        folder = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
        return cls(Path(folder) if folder else None, key)

    def _warmed_before(self) -> bool:
        return self.mark is not None and self.mark.exists()

    def take(self) -> None:
        """Wait for the turn (blocking until the holder gives it back or ends); at once when `key` was warmed up
        before, by this process's turn or an earlier one's."""
        if self.path is None or self._fd is not None or self._warmed_before():
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        self._fd = fd
        if self._warmed_before():  # the holder this process waited for warmed the same key up
            self._release()

    def warmed_up(self) -> None:
        """This process warmed up: mark the key warm (when it held the turn) and let the next process go."""
        if self._fd is not None and self.mark is not None:
            self.mark.write_text("warmed up\n")
        self.give_back()

    def give_back(self) -> None:
        """Let the next process warm up, leaving no mark (a process that failed to warm up); does nothing when
        this one does not hold the turn."""
        if self._fd is not None:
            self._release()

    def _release(self) -> None:
        assert self._fd is not None
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)
        self._fd = None
