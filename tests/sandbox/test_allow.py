"""The allow-list sandbox: what it shows of the host (derived from the interpreter), the commands it builds
(bubblewrap's arguments, the fallback's script), and the real thing: a confined process sees neither a folder
beside its own nor another checkout's gate, and still imports torch and runs a Triton kernel."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from ferret.sandbox import allow, launch
from ferret.sandbox.launch import (
    BUBBLEWRAP,
    NAMESPACE,
    ProcessOptions,
    candidate_environment,
    folder_view,
    run_isolated,
    sandbox_kind,
)
from ferret.sandbox.view import host_view, neutral_view

REPO = Path(__file__).resolve().parents[2]


# --- the allow-list, built from given paths (pure) -------------------------------------------------------


def test_build_allow_list_resolves_links_and_drops_nested_paths(tmp_path):
    runtime = tmp_path / "runtime"
    (runtime / "lib" / "site-packages").mkdir(parents=True)
    (runtime / "bin").mkdir()
    (runtime / "bin" / "python3.11").write_text("")
    (runtime / "bin" / "python").symlink_to("python3.11")
    (tmp_path / "env").symlink_to(runtime)  # a path through a link, as /lib64 -> usr/lib64
    work = tmp_path / "work"
    work.mkdir()

    built = allow.build_allow_list(
        [str(tmp_path / "env" / "bin" / "python"), str(runtime), str(runtime / "lib" / "site-packages")], [str(work)]
    )
    assert built.read_only == (str(runtime),)  # the real path; what lies inside it is not bound again
    assert built.writable == (str(work),)
    # The link on the way is recreated; the one inside the shown folder is there already.
    assert built.symlinks == ((str(tmp_path / "env"), str(runtime)),)
    assert built.hidden == ()


def test_build_allow_list_keeps_the_deny_list_on_top(tmp_path):
    shown, hidden_inside, hidden_outside = tmp_path / "prefix", tmp_path / "prefix" / "gates", tmp_path / "gates"
    for folder in (shown, hidden_inside, hidden_outside, tmp_path / "work", hidden_outside / "lib"):
        folder.mkdir(parents=True, exist_ok=True)
    built = allow.build_allow_list(
        [str(shown), str(hidden_outside / "lib")],
        [str(tmp_path / "work")],
        devices=["/dev/nvidia0", "/dev/nvidia0"],
        hide=[str(hidden_inside), str(hidden_outside)],
    )
    # A hidden folder inside a shown one is covered; a path inside a hidden folder is not shown at all;
    # a hidden folder that is not shown needs nothing.
    assert built.read_only == (str(shown),)
    assert built.hidden == (str(hidden_inside),)
    assert built.devices == ("/dev/nvidia0",)


def _pairs(command: list[str], flag: str) -> list[str]:
    return [command[i + 1] for i, arg in enumerate(command) if arg == flag]


def test_bwrap_command_shows_only_the_allow_list():
    built = allow.AllowList(
        read_only=("/opt/py", "/usr/lib/x86_64-linux-gnu"),
        writable=("/tmp/ferret-x/work",),
        devices=("/dev/nvidia0",),
        symlinks=(("/lib64", "usr/lib64"),),
        hidden=("/opt/py/gates",),
    )
    command = allow.bwrap_command("/usr/bin/bwrap", built, neutral_view(Path("/tmp/ferret-x/work")), ["python", "-m", "x"])
    assert command[0] == "/usr/bin/bwrap" and command[-4:] == ["--", "python", "-m", "x"]
    for flag in ("--die-with-parent", "--unshare-pid", "--unshare-net", "--unshare-ipc"):
        assert flag in command
    assert command[command.index("--cap-drop") + 1] == "ALL"
    assert "--new-session" not in command  # the judge signals the process group
    assert _pairs(command, "--ro-bind-try") == ["/opt/py", "/usr/lib/x86_64-linux-gnu"]
    # The process's own folder at the neutral place, under a HOME of its own; nothing shows the host's folder.
    bound = command.index("--bind")
    assert command[bound + 1 : bound + 3] == ["/tmp/ferret-x/work", "/home/user/work"]
    assert command.index("/home/user") < bound and command[command.index("/home/user") - 1] == "--tmpfs"
    assert _pairs(command, "--dev-bind-try") == ["/dev/nvidia0"]
    assert _pairs(command, "--symlink") == ["usr/lib64"] and "/lib64" in command
    assert _pairs(command, "--proc") == ["/proc"] and _pairs(command, "--dev") == ["/dev"]
    assert command[command.index("--ro-bind") + 1 : command.index("--ro-bind") + 3] == ["/sys", "/sys"]
    # Parents before what is inside them: the private /tmp before the folder inside it, the shown folder
    # before the tmpfs covering its hidden part, which is made read-only.
    tmp = command.index("/tmp")
    assert tmp < bound and command[tmp - 1] == "--tmpfs"
    cover = command.index("/opt/py/gates")
    assert command.index("/opt/py") < cover and command[cover - 1] == "--tmpfs"
    assert command[cover + 1 : cover + 3] == ["--remount-ro", "/opt/py/gates"]
    assert command[command.index("--chdir") + 1] == "/home/user/work"
    assert command[-7:-4] == ["/", "--chdir", "/home/user/work"] and command[-8] == "--remount-ro"
    at_home = allow.bwrap_command("/usr/bin/bwrap", built, host_view(Path("/tmp/ferret-x/work")), ["python"])
    assert _pairs(at_home, "--bind") == ["/tmp/ferret-x/work"] and "/home/user" not in at_home


def test_namespace_script_builds_the_same_root_by_hand(tmp_path):
    (tmp_path / "py").mkdir()
    (tmp_path / "work").mkdir()
    built = allow.AllowList((str(tmp_path / "py"),), (str(tmp_path / "work"),), (), (("/lib64", "usr/lib64"),), ())
    root = tmp_path / "root"
    script = allow.namespace_script(built, root, neutral_view(tmp_path / "work"))
    lines = script.splitlines()
    assert lines[1] == f"mount -t tmpfs -o mode=0755,size=16m ferret-root {root}"
    assert f"mount --bind {tmp_path / 'py'} {root}{tmp_path / 'py'} && mount -o remount,bind,ro {root}{tmp_path / 'py'}" in script
    home = lines.index(f"mkdir -p {root}/home/user && mount -t tmpfs -o mode=0755 ferret-home {root}/home/user")
    assert lines.index(f"mount --bind {tmp_path / 'work'} {root}/home/user/work") > home
    assert str(tmp_path / "work") not in script.replace(f"mount --bind {tmp_path / 'work'} ", "")
    assert f"ln -sfn usr/lib64 {root}/lib64" in script
    assert f"mount -t proc proc {root}/proc" in script and f"mount -o remount,ro {root}" in lines
    assert lines[-1].startswith(f"exec unshare --root={root} --wd=/home/user/work ")
    assert "--bounding-set=-all --inh-caps=-all --" in lines[-1] and lines[-1].endswith('"$@"')
    command = allow.namespace_command(built, root, neutral_view(tmp_path / "work"), ["python", "x.py"])
    assert command[:4] == ["unshare", "--mount", "--propagation", "private"] and command[-2:] == ["python", "x.py"]


# --- the allow-list of this machine, derived from the interpreter ------------------------------------------


def test_host_paths_come_from_the_interpreter_and_leave_the_user_out():
    import torch
    import triton

    read_only, _ = allow.host_paths()
    shown = allow.build_allow_list(read_only, [str(REPO / ".no-such-folder")]).read_only

    def visible(path: str) -> bool:
        real = os.path.realpath(path)
        return any(real == s or real.startswith(s + "/") for s in shown)

    for needed in (sys.executable, os.__file__, torch.__file__, triton.__file__):
        assert visible(needed), needed
    # Neither the repository, nor HOME, nor the current folder, nor a folder holding any of them (a folder
    # inside one, such as a venv in the checkout, may be shown).
    for private in (REPO, REPO / "tasks", REPO / "contracts", REPO / "gates", Path.home(), Path.cwd()):
        assert not visible(str(private)), private
    assert "/" not in shown and "/home" not in shown and "/root" not in shown


def test_a_system_prefix_is_never_shown_whole(monkeypatch):
    # A distribution's Python (prefix /usr): its stdlib and site-packages, not the whole of /usr.
    for name in ("prefix", "base_prefix", "exec_prefix", "base_exec_prefix"):
        monkeypatch.setattr(sys, name, "/usr")
    monkeypatch.setattr(sys, "path", ["", "/usr/lib/python3.11", "/usr/lib/python3/dist-packages", str(REPO)])
    runtime = allow._runtime()
    assert "/usr" not in runtime and "/" not in runtime and str(REPO) not in runtime and "" not in runtime
    assert "/usr/lib/python3.11" in runtime and "/usr/lib/python3/dist-packages" in runtime


# --- the real thing ----------------------------------------------------------------------------------------

PROBE = """
import os
for path in {secrets!r}:
    try:
        open(path).read()
        print("READ", path)
    except OSError as err:
        print("REFUSED", type(err).__name__)
print("LISTED", os.path.exists({beside!r}), os.path.exists({repo!r}))
import torch
import triton
import triton.language as tl


@triton.jit
def double(x, y, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y + offsets, tl.load(x + offsets, mask=offsets < n) * 2, mask=offsets < n)


x = torch.arange(10, dtype=torch.float32)
y = torch.empty_like(x)
double[(2,)](x, y, 10, BLOCK=8)
print("TRITON", y.tolist() == (x * 2).tolist())
import tempfile
print("PATHS", os.path.dirname(__file__), os.getcwd(), os.environ["HOME"], tempfile.gettempdir(), triton.knobs.cache.dir)
open("written", "w").write("own folder")
os.makedirs(triton.knobs.cache.dir, exist_ok=True)
open(os.path.join(triton.knobs.cache.dir, "planted"), "w").write("in the sandbox's HOME")
"""


def _kind_or_skip(monkeypatch, kind: str) -> None:
    monkeypatch.setenv(launch.SANDBOX_CHOICE, kind)
    if sandbox_kind() != kind:
        pytest.skip(f"{kind} cannot confine a process on this machine (no bwrap, or no root for a mount namespace)")


@pytest.mark.parametrize("kind", [BUBBLEWRAP, NAMESPACE])
def test_a_confined_process_sees_only_the_allow_list(kind, tmp_path, monkeypatch):
    _kind_or_skip(monkeypatch, kind)
    work, beside = tmp_path / "checkout" / "work", tmp_path / "checkout" / "beside"
    other_gate = tmp_path / "other-checkout" / "gates" / "abc123"  # another checkout's gate, not in `hide`
    for folder in (work, beside, other_gate):
        folder.mkdir(parents=True)
    (beside / "notes.txt").write_text("beside")
    (other_gate / "golden.safetensors").write_text("golden")
    secrets = [
        str(beside / "notes.txt"),
        str(other_gate / "golden.safetensors"),
        str(REPO / "tasks" / "rmsnorm" / "reference.py"),
    ]
    (work / "probe.py").write_text(PROBE.format(secrets=secrets, beside=str(beside), repo=str(REPO / "tasks")))
    env = candidate_environment(work, interpret=True)
    view = folder_view(work)
    assert view.neutral  # every path the process is given is in its own terms
    outcome = run_isolated([sys.executable, view.seen(work / "probe.py")], work, env, ProcessOptions(240, 8000, confine=True))
    lines = outcome.stderr_tail.splitlines()
    assert outcome.sandbox == kind and outcome.returncode == 0, outcome.stderr_tail
    assert [line for line in lines if line.startswith(("READ", "REFUSED"))] == ["REFUSED FileNotFoundError"] * 3
    assert "LISTED False False" in lines and "TRITON True" in lines, outcome.stderr_tail
    assert (work / "written").read_text() == "own folder"  # its own folder is the host's, writable
    # ... shown where a user's could be: /home/user/work, HOME /home/user, /tmp and Triton's cache at their defaults,
    # HOME a tmpfs of the sandbox's own (nothing written there reaches the host's folder).
    assert "PATHS /home/user/work /home/user/work /home/user /tmp /home/user/.triton/cache" in lines, outcome.stderr_tail
    assert not list(work.rglob("planted"))


@pytest.mark.parametrize("kind", [BUBBLEWRAP, NAMESPACE])
def test_the_deny_list_still_covers_a_hidden_folder_inside_a_shown_one(kind, tmp_path, monkeypatch):
    _kind_or_skip(monkeypatch, kind)
    shown, work = tmp_path / "extra", tmp_path / "work"
    (shown / "gates").mkdir(parents=True)
    work.mkdir()
    (shown / "helper.py").write_text("VALUE = 7\n")
    (shown / "gates" / "golden.safetensors").write_text("golden")
    monkeypatch.setenv("FERRET_CANDIDATE_PATH", str(shown))  # a folder shown read-only, on the import path
    code = ("import os, helper; print('SEEN', helper.VALUE, os.listdir({gates!r}), os.access({helper!r}, os.W_OK))").format(
        gates=str(shown / "gates"), helper=str(shown / "helper.py")
    )
    outcome = run_isolated(
        [sys.executable, "-c", code],
        work,
        candidate_environment(work, interpret=True),
        ProcessOptions(60, 4000, hide=[shown / "gates"]),
    )
    assert outcome.sandbox == kind and "SEEN 7 [] False" in outcome.stderr_tail, outcome


@pytest.mark.parametrize("kind", [BUBBLEWRAP, NAMESPACE])
def test_a_confined_process_is_classified_and_watched_as_before(kind, tmp_path, monkeypatch):
    _kind_or_skip(monkeypatch, kind)
    killed = run_isolated(
        [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"],
        tmp_path,
        candidate_environment(tmp_path, interpret=True),
        ProcessOptions(60, 4000, confine=True),
    )
    assert (killed.kind, killed.returncode) == ("signal", -11), killed
    exited = run_isolated(
        [sys.executable, "-c", "import os; os._exit(139)"],
        tmp_path,
        candidate_environment(tmp_path, interpret=True),
        ProcessOptions(60, 4000, confine=True),
    )
    if kind == BUBBLEWRAP:  # bwrap exits 128 + N for both: the message says so
        assert exited.kind == "signal" and "or exited with code 139" in exited.message, exited
    else:
        assert (exited.kind, exited.returncode) == ("exited", 139), exited
    grow = "import time; b = bytearray(600 * 2**20); b[::4096] = b'x' * len(b[::4096]); time.sleep(30)"
    hog = run_isolated(
        [sys.executable, "-c", grow],
        tmp_path,
        candidate_environment(tmp_path, interpret=True),
        ProcessOptions(60, 300, poll_s=0.05, confine=True),
    )
    assert hog.kind == "out_of_memory" and hog.sandbox == kind, hog  # the wrapper's child is watched


def test_a_process_not_confined_runs_as_it_is(tmp_path):
    outcome = run_isolated([sys.executable, "-c", "print('plain')"], tmp_path, dict(os.environ), ProcessOptions(30, 4000))
    assert outcome.sandbox == "none" and outcome.stderr_tail.strip() == "plain"


def test_a_script_tool_brings_its_interpreter_and_its_real_program(tmp_path):
    # Debian and Ubuntu's /sbin/ldconfig is `#!/bin/sh` + `exec /sbin/ldconfig.real "$@"`: seen on the H200,
    # where the confined GPU probe failed with "No such file or directory: '/sbin/ldconfig'".
    wrapper, real = tmp_path / "ldconfig", tmp_path / "ldconfig.real"
    wrapper.write_text('#!/bin/sh\nexec /sbin/ldconfig.real "$@"\n')
    real.write_bytes(b"\x7fELF")
    through_env = tmp_path / "tool"
    through_env.write_text("#!/usr/bin/env sh\necho\n")
    binary = tmp_path / "binary"
    binary.write_bytes(b"\x7fELF not a script")
    needed = allow.script_needs([str(wrapper), str(through_env), str(binary), str(tmp_path / "missing")])
    assert "/bin/sh" in needed and str(real) in needed
    assert "/usr/bin/env" in needed and shutil.which("sh") in needed  # `#!/usr/bin/env sh`: env, and sh found on PATH
    assert str(binary) not in needed and str(binary) + ".real" not in needed


def test_a_candidate_on_the_gpu_is_told_where_libcuda_is(tmp_path, monkeypatch):
    monkeypatch.setattr(allow, "libcuda_folder", lambda: "/usr/lib/x86_64-linux-gnu")
    gpu = candidate_environment(tmp_path / "gpu", interpret=False)
    assert gpu["TRITON_LIBCUDA_PATH"] == "/usr/lib/x86_64-linux-gnu"
    # under the interpreter, and for the reference timer, nothing is set
    assert "TRITON_LIBCUDA_PATH" not in candidate_environment(tmp_path / "cpu", interpret=True)
    assert "TRITON_LIBCUDA_PATH" not in candidate_environment(tmp_path / "ref", interpret=False, runs_candidate=False)


def test_the_probes_outcome_is_remembered_for_later_checks_of_this_boot(tmp_path, monkeypatch):
    probed: list[str] = []
    monkeypatch.setattr(launch, "_works", lambda kind: probed.append(kind) or kind == launch.DENY_LIST)
    monkeypatch.setattr(launch, "_KINDS", {})
    monkeypatch.setattr(launch, "_FAILURES", {"bubblewrap": "probe: exit 1"})
    monkeypatch.setattr(launch, "_PROBE_MEMO", [])
    monkeypatch.delenv(launch.SANDBOX_CHOICE, raising=False)
    launch.remember_probes_in(tmp_path / ".cache")
    assert sandbox_kind() == launch.DENY_LIST and probed == [BUBBLEWRAP, NAMESPACE, launch.DENY_LIST]
    # a later check (a new process: nothing in memory) reads what was probed, failures included
    monkeypatch.setattr(launch, "_KINDS", {})
    monkeypatch.setattr(launch, "_FAILURES", {})
    assert sandbox_kind() == launch.DENY_LIST and len(probed) == 3
    assert launch.sandbox_failures() == {"bubblewrap": "probe: exit 1"}
    # a memo that is not one (written over, half written) is probed again, never trusted
    (memo,) = (tmp_path / ".cache").glob("sandbox-probe-*.json")
    memo.write_text('{"kind": "no such kind"}')
    monkeypatch.setattr(launch, "_KINDS", {})
    assert sandbox_kind() == launch.DENY_LIST and len(probed) == 6


# What torch itself asks of the host inside a candidate's process. Seen on the H200 under the allow-list: importing
# torch._dynamo (torch.profiler, torch.compile) calls getpass.getuser(), whose pwd lookup fails with no /etc/passwd
# shown ("getpwuid(): uid not found: 0"); and platform.architecture() asks for `file`.
TORCH_NEEDS = """
import getpass, platform
import torch
import torch._dynamo
from torch.profiler import ProfilerActivity, profile
with profile(activities=[ProfilerActivity.CPU]) as prof:
    torch.ones(4).sum()
prof.key_averages()
print("USER", getpass.getuser(), platform.architecture()[0])
"""


@pytest.mark.parametrize("kind", [BUBBLEWRAP, NAMESPACE])
def test_what_torch_asks_of_the_host_works_confined(kind, tmp_path, monkeypatch):
    _kind_or_skip(monkeypatch, kind)
    outcome = run_isolated(
        [sys.executable, "-c", TORCH_NEEDS],
        tmp_path,
        candidate_environment(tmp_path, interpret=True),
        ProcessOptions(240, 8000, confine=True),
    )
    assert outcome.sandbox == kind and outcome.returncode == 0, outcome.stderr_tail
    assert "USER user 64bit" in outcome.stderr_tail, outcome.stderr_tail
