"""Run-time limits of a process that runs candidate code, by Python audit hooks (PEP 578).

Installed by the runner and the candidate's timer after the harness has loaded what it needs and before the
candidate's code is loaded. The hook refuses (raises `PermissionError`, so the operation never happens) and
records, so that a candidate that catches the error is still failed by the harness (`Sandbox.take`):

* starting a process (`subprocess.Popen`, `os.posix_spawn`) unless its executable is one of the backend's own
  tools (under the Triton package, a CUDA toolkit, or the C compiler and `ldconfig` Triton builds its
  launcher with, without the compiler flags that run other programs), or the system's `file` on files the
  process may read anyway (`platform.architecture()` runs it); `os.system`, `os.exec*`, `os.fork`,
  `os.forkpty` and `os.spawn*` always;
* writing a file (open for writing, create, remove, rename, link, chmod, ...) outside the process's own
  folder, its temp folder and its Triton cache (the sandbox's own /tmp and `~/.triton`, where it shows the folder
  at the neutral place: `ferret.sandbox.view`);
* reading a file or listing a folder outside the allow-list: the Python runtime and its installed packages,
  the process's own folder (which holds the copied ferret runtime and the candidate), /proc, /sys, /dev,
  the Triton cache, CUDA folders;
* loading a native library with ctypes outside the runtime, installed packages and CUDA folders (a CUDA
  library by its bare name too; never the process's own folder, where a candidate could have written one).

Paths are resolved (`os.path.realpath`, relative to the current folder) before they are compared. An
audit hook cannot be removed from Python; native code (a C extension, ctypes calls into libc) is not
audited: that residual risk is in SECURITY.md.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ferret import wire

_SPAWN_ALWAYS_REFUSED = frozenset({"os.system", "os.exec", "os.fork", "os.forkpty", "os.spawn", "pty.spawn", "os.startfile"})
_SPAWN_BY_PATH = frozenset({"subprocess.Popen", "os.posix_spawn"})
# event -> positions of the arguments that are paths written (created, removed, renamed, changed)
_WRITES = {
    "os.mkdir": (0,),
    "os.remove": (0,),
    "os.rmdir": (0,),
    "os.rename": (0, 1),
    "os.replace": (0, 1),
    "os.link": (0, 1),
    "os.symlink": (1,),
    "os.chmod": (0,),
    "os.chown": (0,),
    "os.truncate": (0,),
    "os.utime": (0,),
    "os.mkfifo": (0,),
    "os.mknod": (0,),
    "shutil.rmtree": (0,),
    "shutil.copyfile": (1,),
    "shutil.copymode": (1,),
    "shutil.copystat": (1,),
    "shutil.move": (1,),
    "os.setxattr": (0,),
    "os.removexattr": (0,),
}
_READS = {
    "os.listdir": (0,),
    "os.scandir": (0,),
    "glob.glob": (0,),
    "shutil.copyfile": (0,),
    "shutil.move": (0,),
    "os.getxattr": (0,),
    "os.listxattr": (0,),
}
_WATCHED = frozenset({"open", "ctypes.dlopen", *_SPAWN_ALWAYS_REFUSED, *_SPAWN_BY_PATH, *_WRITES, *_READS})
# Compiler options that make gcc/clang run a program of the caller's choice.
_COMPILER_RUNS_OTHERS = ("-wrapper", "-B", "-specs", "--specs", "-fplugin", "@", "-no-integrated-as", "--gcc-toolchain")
_CUDA_LIBRARIES = ("libcuda.", "libcudart.", "libnvrtc.", "libnvJitLink.", "libcupti.", "libnvidia-ml.", "libcublas")
_SYSTEM_BIN = ("/usr/bin", "/bin")
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
# The cheat (a slug of docs/cheats.md's catalogue) each refusal is evidence of, for the timing process's flags; the
# judge names the runner's failure kinds the same way (ferret/gate/detect.py).
CHEAT_OF = {
    wire.FailureKind.PROCESS_SPAWNED: "side_stream_or_thread",
    wire.FailureKind.READ_REFUSED: "reading_expected",
    wire.FailureKind.WRITE_REFUSED: "gate_tampering",
    wire.FailureKind.NATIVE_LOAD_REFUSED: "library_call",
}


@dataclass(frozen=True)
class Policy:
    """What a process that runs candidate code may touch (every folder resolved)."""

    own: tuple[str, ...]
    read: tuple[str, ...]
    native: tuple[str, ...]
    tools: tuple[str, ...]  # folders whose executables may be started
    tool_files: tuple[str, ...]  # single executables that may be started (the C compiler, ldconfig)
    compilers: tuple[str, ...] = field(default=())


def _real(path: str | bytes | os.PathLike) -> str:
    return os.path.realpath(os.path.abspath(os.fsdecode(path)))


def _under(path: str, folders: tuple[str, ...]) -> bool:
    return any(path == f or path.startswith(f if f.endswith(os.sep) else f + os.sep) for f in folders)


def _cuda_folders() -> list[str]:
    found = [os.environ.get(k, "") for k in ("CUDA_HOME", "CUDA_PATH")]
    found += [str(p) for p in Path("/usr/local").glob("cuda*")] + ["/opt/nvidia", "/usr/lib/wsl/lib"]
    return [f for f in found if f and os.path.isdir(f)]


def default_policy(own: Path, also_own: tuple[str, ...] = ()) -> Policy:
    """The allow-lists for a process whose own folder is `own` (its temp folder and Triton cache are inside, or in
    `also_own`: the sandbox's own /tmp and `~/.triton` where it shows the folder at the neutral place)."""
    owned = [own, *also_own, os.environ.get("TMPDIR", ""), os.environ.get("TRITON_CACHE_DIR", "")]
    installed = [p for p in sys.path if p and os.path.isdir(p) and Path(p).name in ("site-packages", "dist-packages")]
    extra = [p for p in os.environ.get("FERRET_CANDIDATE_PATH", "").split(os.pathsep) if p]
    runtime = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    cuda = _cuda_folders()
    import importlib.util

    triton = importlib.util.find_spec("triton")
    triton_dir = [os.path.dirname(triton.origin)] if triton is not None and triton.origin else []
    compilers = [shutil.which(c) for c in ("gcc", "clang", "cc", "g++", "clang++", "c++")]
    tool_files = [c for c in compilers if c] + [t for t in ("/sbin/ldconfig", "/usr/sbin/ldconfig") if os.path.exists(t)]

    def resolved(paths) -> tuple[str, ...]:
        return tuple(sorted({_real(p) for p in paths if p}))

    return Policy(
        own=resolved(owned),
        read=resolved([*owned, *installed, *extra, *runtime, *cuda, "/proc", "/sys", "/dev"]),
        native=resolved([*installed, *runtime, *cuda]),
        tools=resolved([*triton_dir, *cuda]),
        tool_files=resolved(tool_files),
        compilers=resolved(c for c in compilers if c),
    )


class Sandbox:
    """The installed hook's record: what it refused, by failure kind, since the last `take`."""

    def __init__(self) -> None:
        self._seen: list[tuple[wire.FailureKind, str]] = []

    def refuse(self, kind: wire.FailureKind, what: str) -> None:
        if len(self._seen) < 100:
            self._seen.append((kind, f"{what} (called from {_callers()})"))
        raise PermissionError(f"ferret sandbox: {what}")

    def take(self) -> list[tuple[wire.FailureKind, str]]:
        seen, self._seen = self._seen, []
        return seen


def _callers(frames: int = 3) -> str:
    """The innermost frames outside this module and the standard library's process and file helpers,
    `file:line` each: where a refused operation came from, for whoever reads the verdict."""
    skipped = (__file__, os.sep + "subprocess.py", os.sep + "platform.py", os.sep + "shutil.py", os.sep + "pathlib")
    found: list[str] = []
    frame = sys._getframe(1)  # frames only: reading source lines (traceback) would open files inside the hook
    while frame is not None and len(found) < frames:
        name = frame.f_code.co_filename
        if not any(s in name for s in skipped):
            found.append(f"{name}:{frame.f_lineno}")
        frame = frame.f_back
    return " < ".join(found) or "unknown"


def _path_args(args: tuple, positions: tuple[int, ...]) -> list[str | bytes | os.PathLike]:
    return [a for i in positions if i < len(args) and isinstance(a := args[i], str | bytes | os.PathLike)]


def _open_writes(args: tuple) -> bool:
    mode, flags = (args[1] if len(args) > 1 else None), (args[2] if len(args) > 2 else 0)
    if isinstance(mode, str) and any(c in mode for c in "wax+"):
        return True
    return isinstance(flags, int) and bool(flags & _WRITE_FLAGS)


def _executable(event: str, args: tuple) -> tuple[str, list[str]]:
    """(the executable resolved, its arguments) of a process-start event."""
    exe, argv = args[0], (list(args[1]) if len(args) > 1 and isinstance(args[1], list | tuple) else [])
    exe = os.fsdecode(exe if exe is not None else (argv[0] if argv else ""))
    if os.sep not in exe:
        exe = shutil.which(exe) or exe
    return _real(exe), [os.fsdecode(a) for a in argv if isinstance(a, str | bytes)]


def _inspects_readable_files(policy: Policy, exe: str, argv: list[str]) -> bool:
    """`file` (the system's, by path) on files the process may read anyway: Python's own
    `platform.architecture()` runs `file -b <interpreter>`, and `file` reads only the files it is given."""
    if os.path.basename(exe) != "file" or not _under(exe, _SYSTEM_BIN):
        return False
    named = [a for a in argv[1:] if not a.startswith("-")]
    return bool(named) and all(_under(_real(a), policy.read) for a in named)


def _absent_program(policy: Policy, event: str, args: tuple) -> bool:
    """A program named without a folder that no folder of PATH holds: the start fails by itself ('No such file'),
    nothing runs. Under the allow-list, Python's own `platform.architecture()` asks for `file`, which is not
    shown. Only when every folder of PATH is absolute and outside what the process may write: otherwise the
    candidate could put the program there between this check and the start."""
    name = args[0] if args and args[0] is not None else (args[1][0] if len(args) > 1 and args[1] else "")
    name = os.fsdecode(name)
    if not name or os.sep in name or event != "subprocess.Popen" or shutil.which(name) is not None:
        return False
    folders = os.environ.get("PATH", os.defpath).split(os.pathsep)
    return all(os.path.isabs(f) and not _under(_real(f), policy.own) for f in folders)


def _check_spawn(policy: Policy, sandbox: Sandbox, event: str, args: tuple) -> None:
    if event in _SPAWN_ALWAYS_REFUSED:
        sandbox.refuse(wire.FailureKind.PROCESS_SPAWNED, f"{event}{args[:2]!r}"[:300])
    if _absent_program(policy, event, args):
        return
    exe, argv = _executable(event, args)
    allowed = _under(exe, policy.tools) or exe in policy.tool_files or _inspects_readable_files(policy, exe, argv)
    if allowed and exe in policy.compilers and any(a.startswith(_COMPILER_RUNS_OTHERS) for a in argv[1:]):
        allowed = False
    if not allowed:
        sandbox.refuse(wire.FailureKind.PROCESS_SPAWNED, f"{event}: {exe} {argv[1:4]!r}"[:300])


def _check_native(policy: Policy, sandbox: Sandbox, name: object) -> None:
    if isinstance(name, str | bytes) and os.sep not in os.fsdecode(name):
        if os.fsdecode(name).startswith(_CUDA_LIBRARIES):
            return
    elif isinstance(name, str | bytes):
        path = _real(name)
        # Triton looks for the driver by full path in ldconfig's folders too; a CUDA library outside the
        # process's own folders cannot be one the candidate wrote (writes are refused there).
        if _under(path, policy.native) or (os.path.basename(path).startswith(_CUDA_LIBRARIES) and not _under(path, policy.own)):
            return
    sandbox.refuse(wire.FailureKind.NATIVE_LOAD_REFUSED, f"ctypes.dlopen({name!r})"[:300])


def make_hook(policy: Policy, sandbox: Sandbox):
    """The audit hook itself (cheap for every event it does not watch)."""
    watched, writes, reads = _WATCHED, _WRITES, _READS

    def hook(event: str, args: tuple) -> None:
        if event not in watched:
            return
        if event == "open":
            if not args or not isinstance(args[0], str | bytes | os.PathLike):
                return  # an fd already open
            path = _real(args[0])
            if _open_writes(args):
                if not _under(path, policy.own) and path != os.devnull:
                    sandbox.refuse(wire.FailureKind.WRITE_REFUSED, f"open for writing: {path}")
            elif not _under(path, policy.read):
                sandbox.refuse(wire.FailureKind.READ_REFUSED, f"open for reading: {path}")
        elif event == "ctypes.dlopen":
            _check_native(policy, sandbox, args[0] if args else None)
        elif event in _SPAWN_ALWAYS_REFUSED or event in _SPAWN_BY_PATH:
            _check_spawn(policy, sandbox, event, args)
        else:
            for raw in _path_args(args, writes.get(event, ())):
                if not _under(path := _real(raw), policy.own):
                    sandbox.refuse(wire.FailureKind.WRITE_REFUSED, f"{event}: {path}")
            for raw in _path_args(args, reads.get(event, ())):
                if not _under(path := _real(raw), policy.read):
                    sandbox.refuse(wire.FailureKind.READ_REFUSED, f"{event}: {path}")

    return hook


ENABLE = "FERRET_SANDBOX_AUDIT"  # read in the judge's environment only (`wanted`); never set for a candidate


def wanted() -> bool:
    """Whether the judge installs the hooks in the processes that run candidate code: always, unless the
    judge's own environment says FERRET_SANDBOX_AUDIT=0 (for tests of the layers beneath it, such as the
    mount namespace or the process-group kill, which must hold on their own; the verdict's `isolation`
    says when the hooks were off)."""
    return os.environ.get(ENABLE, "1") != "0"


def install_if_asked(own: Path, settings: Mapping[str, str]) -> Sandbox | None:
    """The hook, in a process the judge started to run candidate code (its job's settings say so,
    `ferret.sandbox.launch.candidate_settings`); None elsewhere (a test calling the runner's main in its own process).
    The settings may name folders the process also owns (`wire.SETTING_OWN_FOLDERS`)."""
    if settings.get(wire.SETTING_AUDIT) != "1":
        return None
    also = json.loads(settings.get(wire.SETTING_OWN_FOLDERS, "[]"))
    return install(own, default_policy(own, tuple(str(folder) for folder in also)))


def install(own: Path, policy: Policy | None = None) -> Sandbox:
    """Add the hook for a process whose own folder is `own`; it stays for the life of the process."""
    sandbox = Sandbox()
    sys.addaudithook(make_hook(policy or default_policy(own), sandbox))
    return sandbox


def first_refusal(sandbox: Sandbox | None) -> tuple[wire.FailureKind, str] | None:
    """The first thing refused since the last look (the kind names it), with a count of the rest."""
    seen = sandbox.take() if sandbox is not None else []
    if not seen:
        return None
    kind, what = seen[0]
    more = f" (and {len(seen) - 1} more refused)" if len(seen) > 1 else ""
    return kind, f"the sandbox refused {what}{more}"


def load_language_runtime(candidate: Path, on_gpu: bool) -> None:
    """Before `install`: what the candidate's language loads from native libraries as it starts (its backend's
    `load_before_sandbox`: CuPy and NVRTC for a CUDA candidate), loaded by the harness while loading is still allowed.
    A machine without them is the judge's to refuse before any process starts (ferret.gate.judge); here it is left
    to the first launch to say so."""
    from ferret.backends.registry import backend_for
    from ferret.errors import BackendUnavailable

    try:
        text = candidate.read_text(errors="replace")
    except OSError:
        return
    try:
        backend_for(text).load_before_sandbox(on_gpu)
    except BackendUnavailable:
        pass
