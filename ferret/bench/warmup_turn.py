"""The reference timers of a check warm up one at a time: load the baseline, torch.compile it, warm every case.

torch.compile's generated Triton kernels pick their launch configuration by timing candidates on their first call
(inductor's autotuning), and the pick is written to the compile cache that later processes read. Three reference
processes compiling at once on a cold cache picked differently: rope prefill's compiled baseline read 293 us in
one process and 345 us in the other two of the same check, and 345 us in every process of the next checks, which
read the cache (H200, 2026-12-01, session 6 call 1). Taking turns, the first process compiles (alone among the
reference processes) and the others load its picks. A warm cache's loads overlap the candidate's correctness run
either way, with less contention for the host's cores.

The turn is an exclusive `flock` on a file in the compile cache's folder: the kernel gives it back when the holder
ends, however it ends, so a reference process that crashes while warming up holds no one up.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

LOCK_FILE = "warm-up-turn.lock"


class WarmUpTurn:
    """One process's turn to warm up, among the processes sharing `folder`; a turn with no folder is always free."""

    def __init__(self, folder: Path | None):
        self.path = folder / LOCK_FILE if folder is not None else None
        self._fd: int | None = None

    @classmethod
    def for_compile_cache(cls) -> WarmUpTurn:
        """The turn among the processes sharing this process's torch.compile cache (TORCHINDUCTOR_CACHE_DIR)."""
        folder = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
        return cls(Path(folder) if folder else None)

    def take(self) -> None:
        """Wait for the turn (blocking until the holder gives it back or ends)."""
        if self.path is None or self._fd is not None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        self._fd = fd

    def give_back(self) -> None:
        """Let the next process warm up; does nothing when this one does not hold the turn."""
        if self._fd is None:
            return
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)
        self._fd = None
