"""The processes Ferret starts, and how they end with it.

Every child (a candidate's process, the timing process, the test-writer, a final check) starts in a
process group of its own, so that one signal reaches it and everything it started (compile workers,
the candidate's own children). Nothing may outlive a stopped check:

* SIGINT and SIGTERM become `Interrupted` in the main thread (`stop_on_signals`), so every `finally`
  runs: the child's group is killed and its temporary folder removed on the way out;
* untrusted children (candidate code) get SIGKILL at once; Ferret's own children (a nested `ferret
  check`, the test-writer) get SIGTERM first, so they stop their own children and clean up, then SIGKILL;
* every child is also asked by the kernel to die with its parent (PR_SET_PDEATHSIG), for the one case
  no handler sees: the judge itself killed with SIGKILL.

However the judge was started, the same holds. A shell without job control starts a background job
(`cmd &` in a script) with SIGINT ignored, and an ignored disposition, unlike a handler, survives exec: so
`stop_on_signals` takes over an ignored SIGINT or SIGTERM too, and every child starts with SIGINT and
SIGTERM at the system's default, not ignored because the judge's were.

Standard library only: the candidate's process imports this package.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator
from typing import Any

from ferret.errors import Interrupted

_PR_SET_PDEATHSIG = 1
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _prepare_child() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Die with the parent, and start with the stop signals at their default disposition (an ignored one
    would be inherited through exec). Through libc: Python's `signal.signal` works only in the main
    thread, and a child may be started from another."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return
    try:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except AttributeError:
        pass  # not Linux: the signal handlers still stop the children
    libc.signal.restype = ctypes.c_void_p
    libc.signal.argtypes = (ctypes.c_int, ctypes.c_void_p)
    for signum in _STOP_SIGNALS:
        libc.signal(signum, None)  # NULL is SIG_DFL


def start_group(args: list[str], **popen: Any) -> subprocess.Popen:
    """`subprocess.Popen(args)` in a new session (its own process group) that dies with this process, with
    SIGINT and SIGTERM at their default disposition whatever this process inherited."""
    return subprocess.Popen(args, start_new_session=True, preexec_fn=_prepare_child, **popen)


def kill_group(process: subprocess.Popen, grace_s: float = 0.0) -> None:
    """End `process` and its whole group: SIGTERM and up to `grace_s` to stop by itself, then SIGKILL.
    Returns once the process is reaped."""
    if grace_s > 0 and process.poll() is None:
        _signal_group(process, signal.SIGTERM)
        try:
            process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
    # SIGKILL the group even when its leader has exited: its children may still be running.
    _signal_group(process, signal.SIGKILL)
    process.wait()


def _signal_group(process: subprocess.Popen, signum: int) -> None:
    try:
        os.killpg(process.pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def run_child(
    args: list[str], grace_s: float = 10.0, on_stderr_line: Callable[[str], None] | None = None, **popen: Any
) -> subprocess.CompletedProcess:
    """Like `subprocess.run(args, **popen)` for one of Ferret's own commands, in its own process group:
    if this process is interrupted meanwhile, the child is stopped (SIGTERM, `grace_s`, SIGKILL) before
    the interruption goes on. With `on_stderr_line`, each line the child writes on stderr is passed on as
    it comes (text mode), and the whole of it is still returned."""
    if popen.pop("capture_output", False):
        popen.setdefault("stdout", subprocess.PIPE)
        popen.setdefault("stderr", subprocess.PIPE)
    if on_stderr_line is not None:
        popen.update(stderr=subprocess.PIPE, text=True)
    process = start_group(args, **popen)
    try:
        if on_stderr_line is None:
            stdout, stderr = process.communicate()
        else:
            stdout, stderr = _communicate_streaming(process, on_stderr_line)
    except BaseException:
        kill_group(process, grace_s)
        raise
    return subprocess.CompletedProcess(args, process.returncode, stdout, stderr)


def _communicate_streaming(process: subprocess.Popen, on_line: Callable[[str], None]) -> tuple[Any, str]:
    lines: list[str] = []

    def pump() -> None:
        for line in process.stderr:  # type: ignore[union-attr]
            lines.append(line)
            on_line(line.rstrip("\n"))

    reader = threading.Thread(target=pump, name="ferret-child-stderr", daemon=True)
    reader.start()
    stdout = process.stdout.read() if process.stdout is not None else None
    process.wait()
    reader.join()
    return stdout, "".join(lines)


def _raise_interrupted(signum: int, _frame: object) -> None:
    raise Interrupted(signum)


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """Within the block, SIGINT and SIGTERM raise `Interrupted` (with the signal) in the main thread.

    Where the disposition is the default or ignored (SIG_IGN, as a shell without job control starts a
    background job), the block's handler is installed: a signal sent to the process stops it however it was
    started. Python handlers the caller installed itself are left alone; outside the main thread nothing is
    installed (Python allows handlers only there). The previous dispositions come back afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {}
    for signum in _STOP_SIGNALS:
        current = signal.getsignal(signum)
        if current in (signal.SIG_DFL, signal.SIG_IGN, signal.default_int_handler, _raise_interrupted):
            previous[signum] = current
            signal.signal(signum, _raise_interrupted)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
