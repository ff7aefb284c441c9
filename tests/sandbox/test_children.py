"""The processes Ferret starts end with it: a child's whole group is stopped when the parent is
interrupted, SIGTERM becomes `Interrupted` so cleanup runs, and a child dies with a parent killed outright."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from ferret_testkit import alive, wait_until  # noqa: E402

from ferret.errors import Interrupted  # noqa: E402
from ferret.sandbox.children import run_child, stop_on_signals  # noqa: E402


def _pids(path: Path) -> list[int]:
    return [int(p) for p in path.read_text().split()] if path.exists() and path.read_text().strip() else []


# A parent that starts a child with run_child; the child starts a grandchild and both sleep.
PARENT = """
import sys
from ferret.sandbox.children import run_child, stop_on_signals
from ferret.errors import Interrupted

child = ["sh", "-c", "sleep 3600 & echo $$ $! > {pids}; wait"]
with stop_on_signals():
    try:
        run_child(child, grace_s=2)
    except Interrupted as err:
        print("interrupted", err.signum, flush=True)
        sys.exit(err.exit_code)
"""


def _ignore_stop_signals() -> None:
    """As a shell without job control starts a background job (`cmd &` in a script): SIGINT ignored; SIGTERM
    too, the harder case."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def _ignored_signals(pid: int) -> int:
    """The mask of signals process `pid` ignores (SigIgn in /proc/<pid>/status)."""
    line = next(x for x in Path(f"/proc/{pid}/status").read_text().splitlines() if x.startswith("SigIgn:"))
    return int(line.split()[1], 16)


def _bit(signum: int) -> int:
    return 1 << (signum - 1)


@pytest.mark.parametrize("inherited", ["default", "ignored"])
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_an_interrupted_parent_stops_its_childs_whole_group(tmp_path, signum, inherited):
    """However the parent was started: with the stop signals ignored (a script's background job) it is stopped
    all the same, and its child runs with them at their default."""
    pids = tmp_path / "pids"
    parent = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(PARENT.format(pids=str(pids)))],
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=_ignore_stop_signals if inherited == "ignored" else None,
    )
    try:
        assert wait_until(lambda: len(_pids(pids)) == 2), "the child never started"
        if inherited == "ignored":
            assert _ignored_signals(parent.pid) & _bit(signum) == 0, "the block took over the ignored signal"
            assert _ignored_signals(_pids(pids)[0]) & (_bit(signal.SIGINT) | _bit(signal.SIGTERM)) == 0
        _stop_and_check(parent, pids, signum)
    finally:
        _kill_left_behind(parent, pids)


def _stop_and_check(parent: subprocess.Popen, pids: Path, signum: int) -> None:
    child, grandchild = _pids(pids)
    parent.send_signal(signum)
    out, _ = parent.communicate(timeout=30)
    assert parent.returncode == 128 + signum and f"interrupted {int(signum)}" in out
    assert wait_until(lambda: not alive(child) and not alive(grandchild), 10), "a child outlived its parent"


def _kill_left_behind(parent: subprocess.Popen, pids: Path) -> None:
    """A failed test leaves nothing running: the parent, and its child's whole group."""
    if parent.poll() is None:
        parent.kill()
        parent.wait(timeout=30)
    found = _pids(pids)
    if found:
        try:
            os.killpg(found[0], signal.SIGKILL)  # the child leads its own group, the grandchild in it
        except ProcessLookupError:
            pass


def test_a_child_dies_with_a_parent_killed_outright(tmp_path):
    """SIGKILL reaches no handler: the kernel ends the child (PR_SET_PDEATHSIG)."""
    pids = tmp_path / "pids"
    parent = subprocess.Popen([sys.executable, "-c", textwrap.dedent(PARENT.format(pids=str(pids)))])
    assert wait_until(lambda: len(_pids(pids)) == 2)
    child, grandchild = _pids(pids)
    try:
        parent.kill()
        parent.wait(timeout=30)
        assert wait_until(lambda: not alive(child), 10)
    finally:
        # The kernel ends the child only: the grandchild (still in the child's group) is the test's to end.
        _kill_left_behind(parent, pids)
    assert wait_until(lambda: not alive(grandchild), 10)


def test_stop_on_signals_turns_sigterm_into_interrupted_and_restores_the_handler():
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Interrupted) as caught:
        with stop_on_signals():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler raises before this returns
    assert caught.value.signum == signal.SIGTERM and caught.value.exit_code == 143
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_handler_the_caller_installed_is_left_alone():
    seen = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: seen.append(signum))
    try:
        with stop_on_signals():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.2)
        assert seen == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_run_child_returns_like_subprocess_run():
    done = run_child(
        [sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"],
        capture_output=True,
        text=True,
    )
    assert (done.returncode, done.stdout, done.stderr) == (3, "out\n", "err\n")
