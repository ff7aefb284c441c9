"""Nothing outlives a stopped check or dispatch: on SIGINT or SIGTERM every process the judge started
(the candidate's, and whatever the candidate started) is killed, its temporary folders are removed, and
the gate and its report are left intact."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from ferret_testkit import RMSNORM_CONTRACT, TRITON_RMSNORM, alive, wait_until  # noqa: E402

from ferret.gate.lock import verify_gate  # noqa: E402
from ferret.gate.report import read_report  # noqa: E402

REPO = Path(__file__).resolve().parents[2]

# Starts a grandchild (named by a marker on its command line) and hangs: the judge's limits are far away
# (minutes). The candidate's sandbox shows it nothing beside its own folder (no `sleep`, no folder of the
# test's) and, under bubblewrap, its own PID namespace: the test finds the processes itself, in /proc.
HANGING = """
import subprocess
import sys
import time


def run(inputs, outputs, params, trace=None):
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)", {marker!r}])
    while True:
        time.sleep(1)
"""


@pytest.fixture(scope="module")
def gate(tmp_path_factory):
    from ferret.gate.build import build_gate

    gates = tmp_path_factory.mktemp("interrupt-gates")
    return build_gate(RMSNORM_CONTRACT, gates_dir=gates, profile="cpu")


def _hanging_candidate(tmp_path: Path) -> tuple[Path, str]:
    marker = f"ferret-test-grandchild-{os.getpid()}-{tmp_path.name}"
    candidate = tmp_path / "hangs.py"
    candidate.write_text(textwrap.dedent(HANGING.format(marker=marker)))
    return candidate, marker


def _parents() -> dict[int, int]:
    """Every process's parent (host PIDs), from /proc/<pid>/stat."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    return parents


def _pids(marker: str, root: int) -> list[int]:
    """Once the grandchild runs: every process descended from `root` (the sandbox's wrapper, the candidate's
    process, its grandchild: the judge's own children among them); before that, none. Found by descent, not by
    anything in their environment: a confined process sees a user's paths, not this test's folders."""
    parents = _parents()
    found, frontier = [], [root]
    while frontier:
        children = [pid for pid, parent in parents.items() if parent in frontier and pid not in found]
        found += children
        frontier = children
    started = False
    for pid in found:
        try:
            started = started or marker.encode() in (Path("/proc") / str(pid) / "cmdline").read_bytes()
        except OSError:
            continue
    return found if started else []


def _environment(tmp_path: Path) -> dict[str, str]:
    temp = tmp_path / "tmp"
    temp.mkdir()
    # The hanging candidate starts a grandchild: the audit hooks would refuse it. What is tested here is the
    # layer beneath them, which must hold on its own (a child started from native code is not seen by the
    # hooks): the process-group kill, under the sandbox, and the clean-up after a signal.
    return {**os.environ, "TMPDIR": str(temp), "FERRET_SANDBOX_AUDIT": "0"}


def _stop_when_running(process: subprocess.Popen, marker: str, tmp_path: Path, signum: int) -> tuple[list[int], str, str]:
    assert wait_until(lambda: bool(_pids(marker, process.pid)) or process.poll() is not None, 240), "the candidate never ran"
    pids = _pids(marker, process.pid)
    assert pids, process.communicate()[1][-3000:]
    process.send_signal(signum)
    try:
        out, err = process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        # The signal did not stop it: nothing it started may outlive the test, whatever it failed on.
        process.kill()
        process.communicate()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        raise AssertionError(f"{signal.Signals(signum).name} did not stop the process within 60 s") from None
    return pids, out, err


def _nothing_left(pids: list[int], tmp_path: Path) -> None:
    assert wait_until(lambda: not any(alive(p) for p in pids), 10), f"still running: {[p for p in pids if alive(p)]}"
    left = sorted(p.name for p in (tmp_path / "tmp").iterdir() if p.name.startswith("ferret-"))
    assert left == [], f"temporary folders left behind: {left}"


def _ignore_sigint() -> None:
    """As a shell without job control starts a background job (`cmd &` in a script)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.parametrize(
    ("signum", "inherited"),
    [(signal.SIGINT, "default"), (signal.SIGTERM, "default"), (signal.SIGINT, "ignored")],
    ids=["SIGINT", "SIGTERM", "SIGINT-inherited-ignored"],
)
def test_a_stopped_check_leaves_no_process_no_folder_and_an_intact_gate(gate, tmp_path, signum, inherited):
    from ferret.gate.judge import check

    check(RMSNORM_CONTRACT, TRITON_RMSNORM, gate.parent, profile="cpu")  # a verdict the report must keep
    verdicts = len(read_report(gate).verdicts)
    candidate, marker = _hanging_candidate(tmp_path)
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ferret.cli.main",
            "check",
            str(RMSNORM_CONTRACT),
            str(candidate),
            "--gates-dir",
            str(gate.parent),
            "--profile",
            "cpu",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_environment(tmp_path),
        preexec_fn=_ignore_sigint if inherited == "ignored" else None,
    )
    pids, out, err = _stop_when_running(process, marker, tmp_path, signum)
    assert process.returncode == 128 + signum, err[-3000:]
    assert "GATE_RESULT" not in out and "Traceback" not in err
    assert f"interrupted by {signal.Signals(signum).name}" in err
    _nothing_left(pids, tmp_path)
    verify_gate(gate, require_trusted=True)
    assert len(read_report(gate).verdicts) == verdicts, "the report is intact: no verdict lost, none half-written"


DISPATCH = """
import json, sys
from pathlib import Path
from ferret.dispatch import Dispatcher
from ferret.roles.base import Proposal
from ferret.roles.review import StaticReviewer


class OneProposal:
    name = "scripted-optimizer"

    def propose(self, context):
        return [Proposal(source=Path({candidate!r}).read_text(), approach="hangs")]


log = Dispatcher({contract!r}, optimizer=OneProposal(), reviewer=StaticReviewer(), gates_dir={gates!r},
                 runs_dir={runs!r}, profile="cpu").run()
print(json.dumps({{"status": log.status, "stop_reason": log.stop_reason, "run_id": log.run_id}}))
"""


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_stopped_dispatch_saves_its_log_and_leaves_nothing_running(gate, tmp_path, signum):
    candidate, marker = _hanging_candidate(tmp_path)
    script = DISPATCH.format(
        candidate=str(candidate), contract=str(RMSNORM_CONTRACT), gates=str(gate.parent), runs=str(tmp_path / "runs")
    )
    process = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_environment(tmp_path),
        cwd=REPO,
    )
    pids, out, err = _stop_when_running(process, marker, tmp_path, signum)
    assert process.returncode == 0, err[-3000:]
    result = json.loads(out.strip().splitlines()[-1])
    assert result["status"] == "incomplete"
    assert signal.Signals(signum).name in result["stop_reason"]
    assert f"ferret dispatch --resume {tmp_path / 'runs' / result['run_id']}" in result["stop_reason"]
    _nothing_left(pids, tmp_path)
    saved = json.loads((tmp_path / "runs" / result["run_id"] / "run.json").read_text())
    assert saved["status"] == "incomplete" and saved["stop_reason"] == result["stop_reason"]
    verify_gate(gate, require_trusted=True)
