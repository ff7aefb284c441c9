"""Starting an untrusted process: fresh empty working folder, scrubbed environment, fixed sys.path,
a wall-clock timeout and a host-memory watchdog (RSS polled from /proc, so it works beside CUDA, where
an address-space limit would not)."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

# Variables a candidate may see. Everything else (API keys, tokens, the user's settings) stays out.
_PASSED_THROUGH = ("PATH", "LANG", "LC_ALL", "CUDA_VISIBLE_DEVICES", "CUDA_HOME", "LD_LIBRARY_PATH", "TRITON_INTERPRET")


@dataclass
class ProcessOutcome:
    returncode: int | None
    kind: str  # "exited", "timeout", "out_of_memory", "signal"
    message: str
    seconds: float
    stderr_tail: str
    peak_rss_mb: float


def _rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def candidate_environment(workdir: Path, interpret: bool) -> dict[str, str]:
    env = {k: os.environ[k] for k in _PASSED_THROUGH if k in os.environ}
    # The import path is fixed by the judge: a folder holding only a copy of the ferret modules the
    # candidate's process runs, then the installed-package folders of the judge's sys.path. Project folders
    # (which hold tasks/, the reference) and the current folder never appear, whatever the judge's
    # process added to its own sys.path; FERRET_CANDIDATE_PATH adds folders deliberately.
    ferret_package = Path(__file__).resolve().parents[1]
    runtime = workdir / ".runtime"
    if not (runtime / "ferret").exists():
        # A copy of the few modules the candidate's process runs (not a link: a link's `..` would lead
        # back into the project folder, to its gates and tasks).
        import shutil

        (runtime / "ferret").mkdir(parents=True)
        shutil.copy2(ferret_package / "__init__.py", runtime / "ferret" / "__init__.py")
        for package in ("sandbox", "bench"):
            shutil.copytree(ferret_package / package, runtime / "ferret" / package, ignore=shutil.ignore_patterns("__pycache__"))
    installed = [p for p in sys.path if p and Path(p).is_dir() and Path(p).name in ("site-packages", "dist-packages")]
    extra = [p for p in os.environ.get("FERRET_CANDIDATE_PATH", "").split(os.pathsep) if p]
    paths = [str(runtime)] + extra + installed
    env.update(
        {
            "HOME": str(workdir),
            "TMPDIR": str(workdir),
            "PYTHONPATH": os.pathsep.join(paths),
            "PYTHONNOUSERSITE": "1",
            "PYTHONSAFEPATH": "1",  # no current folder on sys.path: a torch.py written there is never imported
            "FERRET_RUNNER_WAIT_FOR_KILL": "1",
            "PYTHONHASHSEED": "0",
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONUNBUFFERED": "1",
            "TRITON_CACHE_DIR": os.environ.get("TRITON_CACHE_DIR", str(Path.home() / ".triton" / "cache")),
        }
    )
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    else:
        env.pop("TRITON_INTERPRET", None)
    return env


_HIDING: bool | None = None


def hiding_available() -> bool:
    """Whether this machine lets us start a process in a private mount namespace, mount over folders and
    then drop every capability (root, with util-linux's unshare and setpriv). Probed once."""
    global _HIDING
    if _HIDING is None:
        import shutil
        import tempfile

        probe = Path(tempfile.mkdtemp(prefix="ferret-hide-probe-"))
        try:
            (probe / "x").write_text("")
            # The same command the candidates get: the file must be gone behind the tmpfs, and the
            # process must have lost the capabilities to unmount it.
            done = subprocess.run(
                hiding_command(["sh", "-c", f"test ! -e {shlex.quote(str(probe / 'x'))} && ! umount {shlex.quote(str(probe))} 2>/dev/null"],
                               [probe]),
                capture_output=True, timeout=20,
            ) if shutil.which("unshare") and shutil.which("setpriv") else None
            _HIDING = done is not None and done.returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            _HIDING = False
        finally:
            shutil.rmtree(probe, ignore_errors=True)
    return _HIDING


def hiding_command(args: list[str], hide: list[Path]) -> list[str]:
    """`args` run in a private mount namespace where each folder of `hide` is an empty read-only tmpfs:
    the gate's golden files, the trust registry and the reference's code are not there to be read.

    After mounting, every capability is dropped (bounding and inheritable sets, no new privileges): a
    candidate running as root could otherwise unmount the tmpfs (CAP_SYS_ADMIN) or read the files through
    the judge's root at /proc/<judge>/root (which needs the judge's capabilities)."""
    mounts = " && ".join(
        f"mount -t tmpfs -o size=64k,mode=0555,ro ferret-hidden {shlex.quote(str(p))}" for p in hide if Path(p).is_dir()
    )
    drop = 'exec setpriv --no-new-privs --bounding-set=-all --inh-caps=-all -- "$@"'
    script = f"{mounts} && {drop}" if mounts else drop
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", *args]


def run_isolated(
    args: list[str], workdir: Path, env: dict[str, str], timeout_s: float, memory_mb: int, poll_s: float = 0.1,
    hide: list[Path] = (), finished_marker: Path | None = None,
) -> ProcessOutcome:
    """Run `args` isolated. With `finished_marker`, the process is killed (the whole group, SIGKILL) as
    soon as that file appears: the runner writes it after its last result and then waits to be killed."""
    started = time.perf_counter()
    if hide and hiding_available():
        args = hiding_command(args, list(hide))
    stderr_path = workdir / ".stderr"
    with open(stderr_path, "wb") as stderr:
        process = subprocess.Popen(
            args,
            cwd=workdir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=stderr,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, so a kill takes its children too
        )
        kind, message, peak = "exited", "", 0.0
        while True:
            try:
                process.wait(timeout=poll_s)
                break
            except subprocess.TimeoutExpired:
                pass
            peak = max(peak, _rss_mb(process.pid))
            elapsed = time.perf_counter() - started
            if finished_marker is not None and finished_marker.exists():
                kind, message = "finished", ""
            elif elapsed > timeout_s:
                kind, message = "timeout", f"no result after {timeout_s:.0f}s: killed"
            elif peak > memory_mb:
                kind, message = "out_of_memory", f"host memory {peak:.0f} MB over the {memory_mb} MB budget: killed"
            else:
                continue
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait()
            break
    returncode = process.returncode
    if kind == "finished":
        kind, returncode = "exited", 0
    elif kind == "exited" and returncode is not None and returncode < 0:
        sig = signal.Signals(-returncode).name
        kind = "out_of_memory" if sig == "SIGKILL" else "signal"
        message = f"killed by {sig}" + (" (the kernel's OOM killer?)" if sig == "SIGKILL" else "")
    tail = stderr_path.read_bytes()[-4000:].decode(errors="replace")
    return ProcessOutcome(returncode, kind, message, time.perf_counter() - started, tail, peak)
