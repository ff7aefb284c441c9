"""The allow-list: the host's files a process running candidate code may see, and the two commands that show it
those and nothing else: bubblewrap (`bwrap`, preferred when on PATH) or, as the fallback, util-linux's
`unshare` in a private mount namespace building the same root by hand (an empty tmpfs, the allowed paths
bind-mounted into it read-only, `unshare --root` into it, then `setpriv` dropping every capability).

What is shown is derived from the running interpreter and what it has loaded, never from one machine's
layout:

* the Python runtime: `sys.prefix`, `sys.base_prefix` and the exec prefixes whole when they are the
  runtime's own folders (a venv, a pyenv or conda install), else (a prefix such as `/usr`) only the
  stdlib, include and site-packages folders `sysconfig` and `sys.path` name; the interpreter file itself;
  `FERRET_CANDIDATE_PATH`;
* native code: the folder of every shared library this process has mapped (libc, libstdc++, libcuda when
  CUDA is up, ...), the folders `ldconfig -p` lists a CUDA driver library in (how Triton finds it), the
  CUDA folders (`CUDA_HOME`, `CUDA_PATH`, `/usr/local/cuda*`), `LD_LIBRARY_PATH`, and the loader's cache;
* the backend's toolchain: the C compiler Triton builds its launcher with (gcc, clang or cc as found on
  PATH), its own programs (`cc1`, `collect2`, `as`, `ld`, as the compiler names them), `ldconfig`, and the
  folders of the libraries each of those needs (`ldd`); Triton's own tools (ptxas, its CUDA headers and
  libraries) are inside site-packages;
* the GPU's device nodes (`/dev/nvidia*`, `/dev/nvidia-caps`, `/dev/dxg`), a minimal `/dev`, `/proc`,
  `/sys` read-only, a private `/tmp`;
* the process's own folder, writable, shown at the neutral place `ferret.sandbox.view.NEUTRAL_WORK` (its
  FolderView says so), under a private tmpfs HOME (`NEUTRAL_HOME`, where Triton's cache is by default).

Everything else of the host (HOME, the project, other checkouts, gates, the trust registry) is not there.
The judge's deny-list (`hide`) still applies on top: a hidden folder that lies inside an allowed one is
covered by an empty read-only tmpfs. Standard library only: this package is copied into candidate folders.
"""

from __future__ import annotations

import functools
import glob
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ferret.sandbox.view import NEUTRAL_HOME, FolderView

# Prefixes never shown whole: they hold far more than the runtime.
_SYSTEM_PREFIXES = frozenset({"/", "/usr", "/usr/local", "/opt", "/home", "/root"})
_SHARED_LIBRARY = re.compile(r"\.so(\.\d+)*$")
_CUDA_DRIVER = ("libcuda.so", "libnvidia-ml.so", "libnvidia-ptxjitcompiler.so", "libdxcore.so")
_COMPILERS = ("gcc", "clang", "cc")
_COMPILER_PROGRAMS = ("cc1", "collect2", "as", "ld", "lto-wrapper", "liblto_plugin.so")
_LOADER_FILES = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d")
_BASIC_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty")


@dataclass(frozen=True)
class AllowList:
    """What a confined process sees of the host, every path at its own (real) place.

    `read_only`: host paths shown read-only (no path inside another); `writable`: the process's own folder;
    `devices`: device nodes shown as they are; `symlinks`: (where, target as written) recreated so that a
    host path through a link (`/lib64` -> `usr/lib64`, a venv's `bin/python`) still leads somewhere;
    `hidden`: folders inside a shown one that get an empty read-only tmpfs (the judge's deny-list)."""

    read_only: tuple[str, ...]
    writable: tuple[str, ...]
    devices: tuple[str, ...]
    symlinks: tuple[tuple[str, str], ...]
    hidden: tuple[str, ...]


def _under(path: str, folders: Iterable[str]) -> bool:
    return any(path == f or path.startswith(f.rstrip("/") + "/") for f in folders)


def resolve_links(path: str, links: dict[str, str], depth: int = 0) -> str:
    """The real path of `path` (absolute), resolved component by component; every symbolic link met on the
    way (also inside a link's target) is recorded in `links` as where -> target as written."""
    current = "/"
    for part in Path(os.path.normpath(path)).parts[1:]:
        step = os.path.join(current, part)
        if depth < 40 and os.path.islink(step):
            target = os.readlink(step)
            links[step] = target
            current = resolve_links(os.path.normpath(os.path.join(current, target)), links, depth + 1)
        else:
            current = step
    return current


def _runtime() -> list[str]:
    """The interpreter, its standard library and installed packages."""
    prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    own = [p for p in prefixes if os.path.realpath(p) not in _SYSTEM_PREFIXES]
    named = [sysconfig.get_path(n) for n in ("stdlib", "platstdlib", "purelib", "platlib", "include", "platinclude")]
    on_path = [
        p
        for p in sys.path
        if p and os.path.isabs(p) and (Path(p).name in ("site-packages", "dist-packages") or _under(p, prefixes - {"/"}))
    ]
    extra = [p for p in os.environ.get("FERRET_CANDIDATE_PATH", "").split(os.pathsep) if p]
    return [*own, *named, *on_path, *extra, sys.executable]


def _mapped_library_folders(maps: str = "/proc/self/maps") -> list[str]:
    """The folders of the shared libraries this process has loaded (not other mapped files: a golden file
    mapped by safetensors is no library)."""
    try:
        with open(maps) as handle:
            files = {line.split(None, 5)[5].strip() for line in handle if len(line.split(None, 5)) == 6}
    except OSError:
        return []
    return sorted({os.path.dirname(f) for f in files if f.startswith("/") and _SHARED_LIBRARY.search(f)})


def _run(args: list[str]) -> str:
    try:
        return subprocess.run(args, capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def _needed_library_folders(executables: Iterable[str]) -> list[str]:
    """The folders of the libraries each (trusted, host) executable loads, as `ldd` finds them."""
    ldd = shutil.which("ldd")
    if ldd is None:
        return []
    found = set()
    for exe in executables:
        for match in re.finditer(r"(?:=>\s*)?(/\S+\.so\S*)\s+\(0x", _run([ldd, exe])):
            found.add(os.path.dirname(match.group(1)))
    return sorted(found)


def _cuda_driver_folders() -> list[str]:
    """Where the loader's cache has the CUDA driver (Triton looks libcuda up with `ldconfig -p`)."""
    ldconfig = next((t for t in ("/sbin/ldconfig", "/usr/sbin/ldconfig") if os.path.exists(t)), shutil.which("ldconfig"))
    listing = _run([ldconfig, "-p"]) if ldconfig else ""
    return sorted(
        {
            os.path.dirname(line.split("=>")[-1].strip())
            for line in listing.splitlines()
            if "=>" in line and line.strip().startswith(_CUDA_DRIVER)
        }
    )


def libcuda_folder() -> str | None:
    """The folder of the CUDA driver library as the loader's cache lists it, for TRITON_LIBCUDA_PATH: a confined
    process then never needs to run `ldconfig -p` itself to find it."""
    return next((f for f in _machine_driver_folders() if os.path.exists(os.path.join(f, "libcuda.so.1"))), None)


@functools.lru_cache(maxsize=1)
def _machine_driver_folders() -> tuple[str, ...]:
    return tuple(_cuda_driver_folders())


def script_needs(executables: Iterable[str]) -> list[str]:
    """What the scripts among `executables` run: the interpreter of a `#!` line (through `env` too) and a
    `<name>.real` beside it (Debian and Ubuntu's /sbin/ldconfig is a shell script that execs ldconfig.real).
    Without the interpreter inside the confinement, running the script fails with 'No such file or directory'."""
    found = []
    for path in executables:
        try:
            with open(path, "rb") as handle:
                first = handle.readline(256)
        except OSError:
            continue
        if not first.startswith(b"#!"):
            continue
        words = first[2:].decode(errors="replace").split()
        interpreter = words[0] if words else ""
        if os.path.basename(interpreter) == "env" and len(words) > 1:
            found.append(interpreter)
            interpreter = shutil.which(words[1]) or ""
        found += [p for p in (interpreter, path + ".real") if p and os.path.exists(p)]
    return found


def _cuda_folders() -> list[str]:
    found = [os.environ.get(k, "") for k in ("CUDA_HOME", "CUDA_PATH")]
    found += glob.glob("/usr/local/cuda*") + ["/usr/lib/wsl/lib"]
    found += [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p]
    return [f for f in found if f and os.path.isabs(f)]


def _toolchain() -> list[str]:
    """The C compiler, its programs, ldconfig and setpriv (the fallback's last step), with their libraries."""
    compilers = [c for c in (shutil.which(n) for n in _COMPILERS) if c]
    programs = []
    for compiler in compilers:
        for name in _COMPILER_PROGRAMS:
            named = _run([compiler, f"-print-prog-name={name}"]).strip()
            located = named if os.path.isabs(named) else shutil.which(named) if named and "/" not in named else None
            if located:
                programs.append(located)
        libgcc = _run([compiler, "-print-libgcc-file-name"]).strip()
        if os.path.isabs(libgcc):
            programs.append(os.path.dirname(libgcc))  # the compiler's own folder: its headers, crt files, libgcc
    tools = [t for t in ("/sbin/ldconfig", "/usr/sbin/ldconfig", shutil.which("setpriv")) if t and os.path.exists(t)]
    executables = [*compilers, *programs, *tools]
    executables += script_needs(executables)
    headers = ["/usr/include"] if compilers else []
    return [*executables, *headers, *_needed_library_folders(p for p in executables if os.path.isfile(p))]


@functools.lru_cache(maxsize=1)
def _machine() -> tuple[str, ...]:
    """What asking the machine's tools costs (ldconfig, the compiler, ldd): once per process."""
    return (*_machine_driver_folders(), *_toolchain())


def host_paths() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(paths shown read-only, device nodes) for this judge's process. Paths that do not exist are left
    out. The libraries mapped are read again each time: CUDA may have come up since."""
    wanted = [*_runtime(), *_mapped_library_folders(), *_cuda_folders(), *_machine(), *_LOADER_FILES]
    devices: list[str] = sorted({*glob.glob("/dev/nvidia*"), *glob.glob("/dev/dxg")})
    return tuple(p for p in dict.fromkeys(wanted) if os.path.exists(p)), tuple(devices)


def build_allow_list(
    read_only: Sequence[str], writable: Sequence[str], devices: Sequence[str] = (), hide: Sequence[str] = ()
) -> AllowList:
    """The allow-list for `read_only` and `writable` host paths: each resolved to its real path (the links
    on the way recorded to be recreated), a path inside another read-only one dropped, the links that fall
    inside a shown folder dropped (they are there already), the hidden folders kept only where they lie
    inside a shown one. Pure but for reading the links on the host."""
    links: dict[str, str] = {}
    hidden = sorted({os.path.realpath(h) for h in hide})
    real_rw = sorted({resolve_links(os.path.abspath(p), links) for p in writable})
    real_ro = sorted({resolve_links(os.path.abspath(p), links) for p in read_only})
    kept: list[str] = []
    for path in real_ro:  # sorted: a folder comes before what is inside it
        if not _under(path, kept) and not _under(path, hidden) and path not in real_rw:
            kept.append(path)
    shown = [*kept, *real_rw]
    symlinks = tuple(
        sorted(
            (where, target)
            for where, target in links.items()
            if not _under(os.path.dirname(where), shown) and not _under(where, shown)
        )
    )
    # A hidden folder is covered where it lies inside a shown one (never over the process's own folder).
    covered = [h for h in hidden if _under(h, kept) and not any(_under(w, [h]) for w in real_rw)]
    return AllowList(tuple(kept), tuple(real_rw), tuple(sorted(set(devices))), symlinks, tuple(covered))


def allow_list_for(workdir: Path, hide: Sequence[Path] = ()) -> AllowList:
    """The allow-list of a confined process whose own folder is `workdir`, on this machine."""
    read_only, devices = host_paths()
    return build_allow_list(read_only, [str(workdir)], devices, [str(h) for h in hide])


def _depth(path: str) -> int:
    return len(Path(path).parts)


def _mounts(allow: AllowList, view: FolderView) -> list[tuple[str, str, str]]:
    """(kind, where it is shown, its host source) of every mount, parents before what is inside them; kinds: ro,
    rw, dev, tmp, hidden, plus the specials proc, sys, devfs, shm and home (a tmpfs). The process's own folder
    (the writable one) is shown where `view` places it; every other path at its own place."""
    own = os.path.realpath(view.host)
    mounts = [(k, p, p) for k, p in (("devfs", "/dev"), ("proc", "/proc"), ("sys", "/sys"), ("tmp", "/tmp"), ("shm", "/dev/shm"))]
    mounts += [("ro", p, p) for p in allow.read_only]
    mounts += [("rw", str(view.inside) if p == own else p, p) for p in allow.writable]
    mounts += [("dev", d, d) for d in allow.devices] + [("hidden", h, h) for h in allow.hidden]
    if view.neutral:
        mounts.append(("home", str(NEUTRAL_HOME), str(NEUTRAL_HOME)))
    order = {"devfs": 0, "proc": 0, "sys": 0, "tmp": 0, "home": 0, "shm": 1, "ro": 2, "dev": 2, "rw": 3, "hidden": 4}
    return sorted(mounts, key=lambda m: (_depth(m[1]), order[m[0]], m[1]))


def bwrap_command(bwrap: str, allow: AllowList, view: FolderView, args: Sequence[str]) -> list[str]:
    """`args` under bubblewrap, seeing only `allow`: new mount, PID, IPC, UTS, network and cgroup
    namespaces, a fresh /proc, every capability dropped, dying with its parent, the root read-only; its own
    folder where `view` shows it, its working folder. No new session (the judge signals the process group; stdin
    is /dev/null and there is no terminal)."""
    command = [
        bwrap,
        "--die-with-parent",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-net",
        "--unshare-cgroup-try",
        "--cap-drop",
        "ALL",
    ]
    flags = {
        "devfs": ["--dev"],
        "proc": ["--proc"],
        "tmp": ["--tmpfs"],
        "home": ["--tmpfs"],
        "shm": ["--tmpfs"],
        "sys": ["--ro-bind", "/sys"],
        "ro": ["--ro-bind-try"],
        "rw": ["--bind"],
        "dev": ["--dev-bind-try"],
    }
    for kind, path, source in _mounts(allow, view):
        if kind == "hidden":
            command += ["--perms", "0555", "--tmpfs", path, "--remount-ro", path]
        elif kind in ("ro", "rw", "dev"):
            command += [*flags[kind], source, path]
        else:
            command += [*flags[kind], path]
    for where, target in allow.symlinks:
        command += ["--symlink", target, where]
    return [*command, "--remount-ro", "/", "--chdir", str(view.inside), "--", *args]


def namespace_script(allow: AllowList, root: Path, view: FolderView) -> str:
    """The shell script the fallback runs in a private mount namespace (`unshare --mount`): an empty tmpfs
    at `root`, the allow-list bind-mounted into it (read-only but the process's own folder, shown where `view`
    places it), a minimal /dev, /proc, /sys read-only, a private /tmp (and HOME, when `view` is neutral); the
    root made read-only; then `unshare --root` into it and
    `setpriv` dropping every capability (no new privileges) before the process's own command ("$@")."""
    q = shlex.quote
    r = str(root).rstrip("/")
    lines = ["set -e", f"mount -t tmpfs -o mode=0755,size=16m ferret-root {q(r)}"]

    def bind(path: str, read_only: bool, source: str | None = None) -> None:
        into, source = q(r + path), source or path
        if os.path.isdir(source):
            lines.append(f"mkdir -p {into}")
        else:
            lines.append(f"mkdir -p {q(os.path.dirname(r + path))} && touch {into}")
        lines.append(f"mount --bind {q(source)} {into}" + (f" && mount -o remount,bind,ro {into}" if read_only else ""))

    for kind, path, source in _mounts(allow, view):
        into = q(r + path)
        if kind in ("ro", "rw", "dev"):
            bind(path, read_only=kind == "ro", source=source)
        elif kind == "devfs":
            lines.append(f"mkdir -p {into}")
            for device in _BASIC_DEVICES:
                if os.path.exists(device):
                    bind(device, read_only=False)
        elif kind == "proc":
            lines.append(f"mkdir -p {into} && mount -t proc proc {into}")
        elif kind == "sys":
            bind("/sys", read_only=True)
        elif kind in ("tmp", "shm"):
            lines.append(f"mkdir -p {into} && mount -t tmpfs -o mode=1777 ferret-tmp {into}")
        elif kind == "home":
            lines.append(f"mkdir -p {into} && mount -t tmpfs -o mode=0755 ferret-home {into}")
        else:  # hidden
            lines.append(f"mkdir -p {into} && mount -t tmpfs -o ro,size=64k,mode=0555 ferret-hidden {into}")
    for where, target in allow.symlinks:
        lines.append(f"mkdir -p {q(os.path.dirname(r + where))} && ln -sfn {q(target)} {q(r + where)}")
    lines.append(f"mount -o remount,ro {q(r)}")
    setpriv = os.path.realpath(shutil.which("setpriv") or "/usr/bin/setpriv")
    drop = f"{q(setpriv)} --no-new-privs --bounding-set=-all --inh-caps=-all --"
    lines.append(f'exec unshare --root={q(r)} --wd={q(str(view.inside))} {drop} "$@"')
    return "\n".join(lines)


def namespace_command(allow: AllowList, root: Path, view: FolderView, args: Sequence[str]) -> list[str]:
    """`args` in the fallback's private mount namespace (see `namespace_script`). `root` is an empty folder
    of the host the new root is mounted on (inside the namespace only)."""
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", namespace_script(allow, root, view), "sh", *args]
