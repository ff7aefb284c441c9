"""Every exception Ferret raises on purpose, in one module, and the exit code each one means on the
command line. It imports nothing of Ferret, so any layer may raise these without an import loop.

| exception        | whose fault                                   | `ferret` exit |
| ---------------- | --------------------------------------------- | ------------- |
| UsageError       | the user's: a bad option, file or run folder  | 2             |
| ContractError    | the contract file's (names file, field, line) | 2             |
| GateTampered     | a gate whose bytes no longer match its lock   | 3             |
| JudgeError       | the judge's own (not the candidate's)         | 4             |
| MachineFault     | the machine's: disk full, the judge's own out | 5             |
|                  | of memory, a lost GPU (nothing is recorded    |               |
|                  | against the candidate; run the check again)   |               |
| Interrupted      | SIGINT or SIGTERM: every child was stopped    | 130 / 143     |
"""

from __future__ import annotations

import signal
from pathlib import Path


class FerretError(Exception):
    """Base of the errors Ferret raises deliberately (Interrupted aside, which must pass `except Exception`)."""


class UsageError(FerretError, ValueError):
    """A mistake of the user's: the message names the option or file and what was expected."""


class ContractError(FerretError, ValueError):
    """A contract file that cannot be used. The message names the file and each bad field."""


class GateTampered(FerretError):
    """A gate whose bytes no longer match its lock. The message names every offending file."""

    def __init__(self, gate_dir: Path, problems: list[str]):
        self.gate_dir = gate_dir
        self.problems = problems
        super().__init__(f"gate {gate_dir} is tampered:\n  " + "\n  ".join(problems))


class CudaCompileError(FerretError):
    """A CUDA candidate's source that NVRTC refused: the compiler's log, whole, is the message (`log`)."""

    def __init__(self, log: str, flags: list[str]):
        self.log, self.flags = log, flags
        super().__init__(f"NVRTC refused the CUDA source (flags {' '.join(flags)}):\n{log.strip()}")


class BackendUnavailable(FerretError, RuntimeError):
    """A backend this machine lacks (CuPy or NVRTC for CUDA candidates): the message says what to install."""


class JudgeError(FerretError, RuntimeError):
    """The judge itself could not do its job (not the candidate's fault)."""


class MachineFault(FerretError, RuntimeError):
    """The machine failed the check, not the candidate: a full disk, the judge's own process out of memory, a
    GPU that was lost. No verdict is written: a verdict speaks of the candidate, and this run says nothing about
    it. `retry` is the hint the message ends with (what to free or fix before running the check again)."""

    def __init__(self, what: str, retry: str = "free what it names and run the check again"):
        self.what, self.retry = what, retry
        super().__init__(f"{what}; nothing was recorded against the candidate: {retry}")


class Interrupted(KeyboardInterrupt):
    """The process was asked to stop (SIGINT or SIGTERM). A KeyboardInterrupt, so that every `finally`
    runs and no `except Exception` swallows it; `signum` says which signal it was."""

    def __init__(self, signum: int = signal.SIGINT):
        self.signum = signum
        super().__init__(f"stopped by {signal.Signals(signum).name}")

    @property
    def exit_code(self) -> int:
        """The shell's convention: 128 + the signal's number (130 for SIGINT, 143 for SIGTERM)."""
        return 128 + int(self.signum)
