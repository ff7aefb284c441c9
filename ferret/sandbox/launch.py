"""Starting an untrusted process: fresh empty working folder, scrubbed environment, fixed sys.path,
a wall-clock timeout, a host-memory watchdog (RSS polled from /proc, so it works beside CUDA, where
an address-space limit would not) and, for a process that runs candidate code, a sandbox showing it only
an allow-list of the host's files (`ferret.sandbox.allow`): bubblewrap where it is on PATH and works, else
a private mount namespace built by util-linux's unshare, else the older deny-list namespace, else none;
`sandbox_kind` says which, and the verdict records it."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ferret import wire
from ferret.backends.registry import backends
from ferret.sandbox import allow, audit
from ferret.sandbox.children import kill_group, start_group
from ferret.sandbox.view import NEUTRAL_TMP, FolderView, host_view, neutral_view

# Variables a candidate may see. Everything else (API keys, tokens, the user's settings) stays out. OMP_NUM_THREADS:
# a judge limited to fewer CPU threads (several checks side by side on a few cores, as the test suite's two workers
# are) limits its candidates' torch and Triton-interpreter processes alike; unset, torch takes every core.
_PASSED_THROUGH = (
    "PATH",
    "LANG",
    "LC_ALL",
    "CUDA_VISIBLE_DEVICES",
    "CUDA_HOME",
    "LD_LIBRARY_PATH",
    "TRITON_INTERPRET",
    "OMP_NUM_THREADS",
)


# What the judge's environment may say to choose the sandbox: auto (the default: the first that works of
# bubblewrap, mount_namespace, mount_namespace_deny_list) or one of those by name (none if it does not work).
SANDBOX_CHOICE = "FERRET_SANDBOX"
BUBBLEWRAP, NAMESPACE, DENY_LIST, NO_SANDBOX = "bubblewrap", "mount_namespace", "mount_namespace_deny_list", "none"
_ALLOW_LIST_KINDS = (BUBBLEWRAP, NAMESPACE)
NEUTRAL_USER = "user"  # USER and LOGNAME of a process that runs candidate code


@dataclass
class ProcessOutcome:
    returncode: int | None
    kind: str  # "exited", "timeout", "deadline", "out_of_memory", "signal"
    message: str
    seconds: float
    stderr_tail: str
    peak_rss_mb: float
    sandbox: str = NO_SANDBOX  # which sandbox the process ran in (`sandbox_kind`), none when not confined


def _rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as handle:
                found += [int(c) for c in handle.read().split()]
    except (OSError, ValueError):
        pass
    return found


def _tree_rss_mb(pid: int) -> float:
    """RSS of `pid` and every process under it (a sandbox's wrapper forks the process it confines; a
    candidate's children count too)."""
    total, todo, seen = 0.0, [pid], set()
    while todo and len(seen) < 256:
        current = todo.pop()
        if current not in seen:
            seen.add(current)
            total += _rss_mb(current)
            todo += _children(current)
    return total


def folder_view(workdir: Path, kind: str | None = None) -> FolderView:
    """How a process confined in `workdir` by the sandbox `kind` (None: the one `sandbox_kind` picks, as
    `run_isolated` does) sees its folder: at the neutral place under an allow-list sandbox, else where it lies."""
    kind = sandbox_kind() if kind is None else kind
    return neutral_view(workdir) if kind in _ALLOW_LIST_KINDS else host_view(workdir)


def process_view(workdir: Path, runs_candidate: bool) -> FolderView:
    """The view of a process the judge starts in `workdir`: a process running candidate code is confined
    (`folder_view`), the reference timer is not (it sees the host's paths)."""
    return folder_view(workdir) if runs_candidate else host_view(workdir)


def candidate_environment(
    workdir: Path,
    interpret: bool,
    runs_candidate: bool = True,
    compile_flags: Mapping[str, Any] | None = None,
    view: FolderView | None = None,
) -> dict[str, str]:
    """The environment of a process the judge starts in `workdir`, every path in the terms of `view` (by default
    `process_view`). A process that runs candidate code (`runs_candidate`: the runner, the candidate's timer)
    gets Triton's and torch's caches of its own, discarded with it: what a candidate compiles (or plants) is never
    read by a later check or by the baseline. Shown at the neutral place, they are where a user's are (Triton's
    under HOME, a tmpfs of the sandbox's; torch's under the sandbox's /tmp), with neither cache variable nor TMPDIR
    set; elsewhere both caches and TMPDIR are inside `workdir`. A process that runs no candidate code (the reference
    timer) keeps the judge's Triton cache. Only what third-party libraries read is here (Triton's and torch's
    caches, the interpreter switch): the judge's own settings travel in the job (`candidate_settings`), so that
    nothing in the environment says "judged"."""
    view = view or process_view(workdir, runs_candidate)
    env = {k: os.environ[k] for k in _PASSED_THROUGH if k in os.environ}
    # The import path is fixed by the judge: a folder holding only a copy of the ferret modules the
    # candidate's process runs, then the installed-package folders of the judge's sys.path. Project folders
    # (which hold tasks/, the reference) and the current folder never appear, whatever the judge's
    # process added to its own sys.path; FERRET_CANDIDATE_PATH adds folders deliberately.
    runtime = _copy_runtime(workdir)
    installed = [p for p in sys.path if p and Path(p).is_dir() and Path(p).name in ("site-packages", "dist-packages")]
    extra = [p for p in os.environ.get("FERRET_CANDIDATE_PATH", "").split(os.pathsep) if p]
    paths = [view.seen(runtime)] + extra + installed
    env.update(
        {
            "HOME": view.home,
            "PYTHONPATH": os.pathsep.join(paths),
            "PYTHONNOUSERSITE": "1",
            "PYTHONSAFEPATH": "1",  # no current folder on sys.path: a torch.py written there is never imported
            "PYTHONHASHSEED": "0",
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONUNBUFFERED": "1",
            # Asked by getpass.getuser() (torch._dynamo's import, torch.profiler): a confined process has no
            # /etc/passwd to look its user up in, and the host's user name is none of its business; a plain name
            # that says nothing of a judge.
            "USER": NEUTRAL_USER,
            "LOGNAME": NEUTRAL_USER,
        }
    )
    env.update(_caches(workdir, view, runs_candidate))
    libcuda = allow.libcuda_folder() if runs_candidate and not interpret else None
    if libcuda is not None and "TRITON_LIBCUDA_PATH" not in env:
        env["TRITON_LIBCUDA_PATH"] = libcuda  # Triton need not run `ldconfig -p` inside the confinement
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    else:
        env.pop("TRITON_INTERPRET", None)
    return env


def _copy_runtime(workdir: Path) -> Path:
    """A copy of the few ferret modules the candidate's process runs, in `workdir` (not a link: a link's `..`
    would lead back into the project folder, to its gates and tasks)."""
    ferret_package = Path(__file__).resolve().parents[1]
    runtime = workdir / ".runtime"
    if not (runtime / "ferret").exists():
        import shutil

        (runtime / "ferret").mkdir(parents=True)
        for module in ("__init__.py", "errors.py", "wire.py", "syntax.py"):
            shutil.copy2(ferret_package / module, runtime / "ferret" / module)
        for package in ("sandbox", "bench", "backends"):
            shutil.copytree(ferret_package / package, runtime / "ferret" / package, ignore=shutil.ignore_patterns("__pycache__"))
    return runtime


def _caches(workdir: Path, view: FolderView, runs_candidate: bool) -> dict[str, str]:
    """TMPDIR and the cache variables of a process in `workdir` (`candidate_environment` says which)."""
    if not runs_candidate:
        judges = os.environ.get("TRITON_CACHE_DIR", str(Path.home() / ".triton" / "cache"))
        return {"TMPDIR": view.seen(workdir), "TRITON_CACHE_DIR": judges}
    if view.neutral:
        return {}  # the defaults: ~/.triton/cache and /tmp/torchinductor_user, both the sandbox's own
    cache = workdir / ".triton" / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    return {
        "TMPDIR": view.seen(workdir),
        "TRITON_CACHE_DIR": view.seen(cache),
        "TORCHINDUCTOR_CACHE_DIR": view.seen(workdir / ".inductor"),
    }


def candidate_settings(
    workdir: Path,
    runs_candidate: bool = True,
    compile_flags: Mapping[str, Any] | None = None,
    view: FolderView | None = None,
) -> dict[str, str]:
    """The judge's settings for a process it starts in `workdir`, carried in its job (`CandidateJob.settings`,
    `TimingJob.settings`), never in its environment: it waits to be killed after its last result; a process that
    runs candidate code installs the sandbox's audit hooks (`ferret.sandbox.audit`) and gets what each language's
    backend asks for it (`Backend.settings`: CUDA's compiled code cached in `workdir`, compiled with the contract's
    `compile_flags`); every path in the terms of `view` (by default `process_view`). A process shown its folder at
    the neutral place may also write Triton's folder in its HOME (`~/.triton`) and /tmp, both the sandbox's own
    (`wire.SETTING_OWN_FOLDERS`); the rest of HOME stays outside, as anything beside its folder was before."""
    view = view or process_view(workdir, runs_candidate)
    settings = {wire.SETTING_WAIT_FOR_KILL: "1"}
    if runs_candidate:
        for backend in backends():
            settings.update(backend.settings(Path(view.inside), compile_flags or {}))
        if audit.wanted():
            settings[wire.SETTING_AUDIT] = "1"
        if view.neutral:
            settings[wire.SETTING_OWN_FOLDERS] = json.dumps([f"{view.home}/.triton", str(NEUTRAL_TMP)])
    return settings


FALLBACK_FILE_NAME = "candidate.py"


def candidate_file_name(candidate: Path) -> str:
    """The name of the candidate's copy in its process's folder: its own, so that it is loaded under the name
    `import` gives it (`ferret.sandbox.runner.load_candidate`); FALLBACK_FILE_NAME where its own could not be
    imported as itself (not an identifier) or is another module's (the standard library's, an installed package's)."""
    import importlib.util
    import keyword

    stem = candidate.stem
    if candidate.suffix != ".py" or not stem.isidentifier() or keyword.iskeyword(stem):
        return FALLBACK_FILE_NAME
    if stem in sys.modules or stem in sys.stdlib_module_names:
        return FALLBACK_FILE_NAME
    try:
        taken = importlib.util.find_spec(stem) is not None
    except (ImportError, ValueError):
        taken = True
    return FALLBACK_FILE_NAME if taken else candidate.name


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
            done = (
                subprocess.run(
                    hiding_command(
                        [
                            "sh",
                            "-c",
                            f"test ! -e {shlex.quote(str(probe / 'x'))} && ! umount {shlex.quote(str(probe))} 2>/dev/null",
                        ],
                        [probe],
                    ),
                    capture_output=True,
                    timeout=20,
                )
                if shutil.which("unshare") and shutil.which("setpriv")
                else None
            )
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


_KINDS: dict[str, str] = {}
_PROBE = """
import ctypes, os, sys
secret, own = sys.argv[1], sys.argv[2]
assert not os.path.exists(secret), "a file outside the allow-list is visible"
assert ctypes.CDLL(None, use_errno=True).umount2(b"/proc", 2) != 0, "the process can unmount"
open(os.path.join(own, "ok"), "w").write("ok")
"""
# On a machine with a GPU, what a candidate needs of the host beyond Python: torch on the GPU and a Triton kernel
# compiled (the C compiler, ptxas, the CUDA driver), then profiled as the candidate's timer does. The allow-list
# is derived, not tested, on a machine whose layout it has never seen; a sandbox that fails this is skipped for
# the next, and `sandbox_failures` says why.
_GPU_PROBE = """
import os, sys
import torch
import triton
import triton.language as tl


@triton.jit
def _add_one(x_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    inside = offsets < n
    tl.store(x_ptr + offsets, tl.load(x_ptr + offsets, mask=inside) + 1, mask=inside)


x = torch.zeros(8, device="cuda")
_add_one[(1,)](x, 8, BLOCK=8)
assert float(x.sum()) == 8.0, "the Triton kernel ran wrong"
# What the judge's own code in the candidate's processes asks of the host beside the kernel: the profiler (the
# timer's kernel breakdown; it imports torch._dynamo, which asks getpass for the user) and platform's queries.
import getpass, platform
from torch.profiler import ProfilerActivity, profile
with profile(activities=[ProfilerActivity.CUDA]) as prof:
    _add_one[(1,)](x, 8, BLOCK=8)
    torch.cuda.synchronize()
prof.key_averages()
getpass.getuser(), platform.architecture()
open(os.path.join(sys.argv[1], "ok-gpu"), "w").write("ok")
"""
_FAILURES: dict[str, str] = {}


def sandbox_failures() -> dict[str, str]:
    """Each sandbox probed on this machine that failed, with why (the GPU probe's error, for one)."""
    return dict(_FAILURES)


def _gpu_present() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:  # noqa: BLE001 - no torch, no GPU: nothing to probe
        return False


def _runs_a_gpu_kernel(kind: str, base: Path) -> bool:
    """A Triton kernel compiled and run on the GPU inside the sandbox `kind`, with a candidate's environment."""
    own = base / "own-gpu"
    own.mkdir()
    (own / "probe.py").write_text(_GPU_PROBE)
    view = folder_view(own, kind)
    args, root = confined_command(kind, [sys.executable, view.seen(own / "probe.py"), view.seen(own)], own, [])
    try:
        env = candidate_environment(own, interpret=False, runs_candidate=True, view=view)
        done = subprocess.run(args, capture_output=True, timeout=300, cwd=own, env=env, text=True)
    finally:
        if root is not None:
            root.rmdir()
    if done.returncode == 0 and (own / "ok-gpu").exists():
        return True
    _FAILURES[kind] = f"GPU probe: exit {done.returncode}: {done.stderr[-800:]}"
    return False


def sandbox_kind() -> str:
    """Which sandbox confines candidate processes on this machine: bubblewrap (`bwrap` on PATH), the
    allow-list in a private mount namespace (root, util-linux's unshare and setpriv), the deny-list mount
    namespace of older versions (`hiding_command`), or none. Each is probed once with a real process: it
    must start Python, write in its own folder, not see a file beside that folder, and not unmount; on a GPU
    machine, compile and run a Triton kernel. What was probed is remembered for later checks of this boot
    (`remember_probes_in`)."""
    choice = os.environ.get(SANDBOX_CHOICE, "auto")
    if choice not in _KINDS:
        remembered = _recall_probes(choice)
        if remembered is None:
            tried = (BUBBLEWRAP, NAMESPACE, DENY_LIST) if choice == "auto" else (choice,)
            _KINDS[choice] = next((kind for kind in tried if _works(kind)), NO_SANDBOX)
            _remember_probes(choice)
        else:
            _KINDS[choice], failures = remembered
            _FAILURES.update(failures)
    return _KINDS[choice]


# Where the probes' outcome is kept between checks (a folder of the judge's that no candidate process sees: the
# gates folder's cache); None: probed again in every process. Probing costs seconds (a Triton compile per kind).
_PROBE_MEMO: list[Path] = []


def remember_probes_in(folder: Path) -> None:
    _PROBE_MEMO[:] = [folder]


def _probe_memo_file(choice: str) -> Path | None:
    """The memo of this choice on this boot, for this interpreter, these sandbox sources and this PATH: any of
    those changed, the sandboxes are probed again."""
    if not _PROBE_MEMO:
        return None
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None
    sources = sorted((p.name, p.read_bytes()) for p in Path(__file__).parent.glob("*.py"))
    key = hashlib.sha256(repr((boot, choice, sys.executable, os.environ.get("PATH"), _gpu_present(), sources)).encode())
    return _PROBE_MEMO[0] / f"sandbox-probe-{key.hexdigest()[:32]}.json"


def _recall_probes(choice: str) -> tuple[str, dict[str, str]] | None:
    memo = _probe_memo_file(choice)
    try:
        data = json.loads(memo.read_text()) if memo is not None else None
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("kind") not in (BUBBLEWRAP, NAMESPACE, DENY_LIST, NO_SANDBOX):
        return None
    return data["kind"], {str(k): str(v) for k, v in dict(data.get("failures", {})).items()}


def _remember_probes(choice: str) -> None:
    memo = _probe_memo_file(choice)
    if memo is None:
        return
    try:
        memo.parent.mkdir(parents=True, exist_ok=True)
        partial = memo.with_suffix(".partial")
        partial.write_text(json.dumps({"kind": _KINDS[choice], "failures": _FAILURES}))
        os.replace(partial, memo)
    except OSError:
        pass  # not remembered: the next check probes again


def _works(kind: str) -> bool:
    import shutil
    import tempfile

    if kind == DENY_LIST:
        return hiding_available()
    if kind not in _ALLOW_LIST_KINDS or (kind == BUBBLEWRAP and not shutil.which("bwrap")):
        return False
    if kind == NAMESPACE and not (shutil.which("unshare") and shutil.which("setpriv")):
        return False
    base = Path(tempfile.mkdtemp(prefix="ferret-sandbox-probe-"))
    try:
        own, beside = base / "own", base / "beside"
        own.mkdir()
        beside.mkdir()
        (beside / "secret").write_text("")
        seen = folder_view(own, kind).seen(own)
        args, root = confined_command(kind, [sys.executable, "-S", "-c", _PROBE, str(beside / "secret"), seen], own, [])
        try:
            done = subprocess.run(args, capture_output=True, timeout=60, cwd=own)
        finally:
            if root is not None:
                root.rmdir()
        if not (done.returncode == 0 and (own / "ok").exists()):
            _FAILURES[kind] = f"probe: exit {done.returncode}: {done.stderr[-400:]!r}"
            return False
        return not _gpu_present() or _runs_a_gpu_kernel(kind, base)
    except (OSError, subprocess.TimeoutExpired) as err:
        _FAILURES[kind] = f"probe: {type(err).__name__}: {err}"[:400]
        return False
    finally:
        shutil.rmtree(base, ignore_errors=True)


def confined_command(kind: str, args: list[str], workdir: Path, hide: Sequence[Path]) -> tuple[list[str], Path | None]:
    """`args` (in the process's terms: `folder_view(workdir, kind)`) under the sandbox `kind`, and the empty folder
    the fallback mounts its root on (the caller removes it afterwards; None for the others)."""
    view = folder_view(workdir, kind)
    if kind == BUBBLEWRAP:
        import shutil

        return allow.bwrap_command(shutil.which("bwrap") or "bwrap", allow.allow_list_for(workdir, hide), view, args), None
    if kind == NAMESPACE:
        import tempfile

        root = Path(tempfile.mkdtemp(prefix="ferret-root-"))
        return allow.namespace_command(allow.allow_list_for(workdir, hide), root, view, args), root
    if kind == DENY_LIST and hide:
        return hiding_command(args, list(hide)), None
    return args, None


@dataclass(frozen=True)
class ProcessOptions:
    """The limits and watch of one isolated process (`run_isolated` says what each does)."""

    timeout_s: float
    memory_mb: int
    poll_s: float = 0.1
    hide: Sequence[Path] = ()
    finished_marker: Path | None = None
    deadline: float | None = None
    progress_token: Callable[[], object] | None = None
    on_progress: Callable[[object], None] | None = None
    on_start: Callable[[subprocess.Popen], None] | None = None
    confine: bool | None = None


def run_isolated(args: list[str], workdir: Path, env: dict[str, str], options: ProcessOptions) -> ProcessOutcome:
    """Run `args` isolated, in a process group of its own, and return how it ended, under `options`:

    `timeout_s` is the longest the process may go without progress: with `progress_token` (a function
    the judge polls, say the variant the process is on) each change of the token starts the clock anew
    and is passed to `on_progress`; without it, `timeout_s` is the limit of the whole run. `deadline` (a
    `time.monotonic()` instant) ends the run whatever its progress. With `finished_marker`, the process is
    killed (the whole group, SIGKILL) as soon as that file appears: the runner writes it after its last
    result and then waits to be killed. If this process is interrupted meanwhile, the group is killed
    before the interruption goes on: no candidate process outlives the judge. `on_start` is given the
    started process (its group is the process's pid), for a caller that pauses and resumes it.

    `confine` (by default: whether the caller names folders to `hide`, which every caller running candidate
    code does) runs the process in the sandbox `sandbox_kind` picks, where it sees only the allow-list of
    `ferret.sandbox.allow` and its own `workdir`, shown where `folder_view(workdir)` says: `args` and `env` are
    written in those terms; `hide` is still covered where it lies inside what is
    shown, and is all the deny-list fallback hides."""
    started = time.perf_counter()
    hide = options.hide
    sandbox = sandbox_kind() if (bool(hide) if options.confine is None else options.confine) else NO_SANDBOX
    args, root = confined_command(sandbox, args, workdir, hide)
    stderr_path = workdir / ".stderr"
    try:
        with open(stderr_path, "wb") as stderr:
            process = start_group(args, cwd=workdir, env=env, stdin=subprocess.DEVNULL, stdout=stderr, stderr=subprocess.STDOUT)
            if options.on_start is not None:
                options.on_start(process)
            try:
                kind, message, peak = _watch(process, options)
            finally:
                # Whatever happened (a limit, the finished marker, an interruption of the judge), the whole group goes.
                kill_group(process)
    finally:
        if root is not None:
            root.rmdir()
    returncode, alike = _returncode(process.returncode, sandbox)
    if kind == "finished":
        kind, returncode = "exited", 0
    elif kind == "exited" and returncode is not None and returncode < 0:
        sig = signal.Signals(-returncode).name
        kind = "out_of_memory" if sig == "SIGKILL" else "signal"
        message = f"killed by {sig}" + (" (the kernel's OOM killer?)" if sig == "SIGKILL" else "")
        if alike:
            message += f" (or exited with code {128 - returncode}: bubblewrap reports the two alike)"
    tail = stderr_path.read_bytes()[-4000:].decode(errors="replace")
    return ProcessOutcome(returncode, kind, message, time.perf_counter() - started, tail, peak, sandbox)


def _returncode(returncode: int | None, sandbox: str) -> tuple[int | None, bool]:
    """The process's return code (negative: killed by that signal), and whether it is ambiguous: bubblewrap
    exits with 128 + N both for a process killed by signal N and for one that exited with 128 + N."""
    if sandbox == BUBBLEWRAP and returncode is not None and returncode > 128:
        try:
            signal.Signals(returncode - 128)
        except ValueError:
            return returncode, False
        return 128 - returncode, True
    return returncode, False


def _watch(process: subprocess.Popen, options: ProcessOptions) -> tuple[str, str, float]:
    """Poll `process` until it exits or a limit of `options` ends it; returns (kind, message, peak RSS in MB)."""
    timeout_s, memory_mb, poll_s, progress_token = options.timeout_s, options.memory_mb, options.poll_s, options.progress_token
    finished_marker, deadline, on_progress = options.finished_marker, options.deadline, options.on_progress
    peak = 0.0
    token = progress_token() if progress_token else None
    since = time.monotonic()
    while True:
        try:
            process.wait(timeout=poll_s)
            return "exited", "", peak
        except subprocess.TimeoutExpired:
            pass
        peak = max(peak, _tree_rss_mb(process.pid))
        now = time.monotonic()
        if progress_token is not None:
            latest = progress_token()
            if latest != token:
                token, since = latest, now
                if on_progress is not None:
                    on_progress(latest)
        if finished_marker is not None and finished_marker.exists():
            return "finished", "", peak
        if deadline is not None and now > deadline:
            return "deadline", "the check's deadline passed: killed", peak
        if now - since > timeout_s:
            what = "no progress for" if progress_token is not None else "no result after"
            return "timeout", f"{what} {timeout_s:.0f}s: killed", peak
        if peak > memory_mb:
            return "out_of_memory", f"host memory {peak:.0f} MB over the {memory_mb} MB budget: killed", peak
