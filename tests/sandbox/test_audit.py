"""The audit hooks of a process that runs candidate code (ferret/sandbox/audit.py): refused and recorded
(process starts, reads and writes outside the allow-lists, foreign native libraries), and what the backend
needs still allowed. Each case runs in a fresh interpreter: an audit hook cannot be removed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ferret.sandbox import audit

PROBE = """
import ctypes, json, os, subprocess, sys, tempfile
from pathlib import Path
import torch  # the harness's imports come before the hook, as in the runner
from ferret.sandbox import audit
own = Path(sys.argv[1])
sandbox = audit.install(own)
results = {}
def attempt(name, fn):
    try:
        fn()
        results[name] = "ok"
    except PermissionError as err:
        results[name] = "refused"
    except Exception as err:
        results[name] = type(err).__name__
"""


def _probe(tmp_path: Path, body: str) -> tuple[dict, list]:
    own = tmp_path / "own"
    own.mkdir(exist_ok=True)
    script = tmp_path / "probe.py"
    script.write_text(
        PROBE
        + textwrap.dedent(body)
        + """
print(json.dumps({"results": results, "seen": [[k.value, w] for k, w in sandbox.take()]}))
"""
    )
    env = {**os.environ, "TMPDIR": str(own), "TRITON_CACHE_DIR": str(own / ".triton")}
    done = subprocess.run([sys.executable, str(script), str(own)], cwd=own, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout.strip().splitlines()[-1])
    return data["results"], data["seen"]


def test_process_starts_are_refused_and_recorded(tmp_path):
    results, seen = _probe(
        tmp_path,
        """
        import subprocess
        attempt("popen", lambda: subprocess.Popen([sys.executable, "-c", "pass"]).wait())
        attempt("system", lambda: os.system("true"))
        attempt("fork", lambda: os.fork())
        attempt("exec", lambda: os.execv("/bin/true", ["true"]))
        attempt("spawn", lambda: os.posix_spawn("/bin/true", ["true"], {}))
        attempt("shell", lambda: subprocess.run("true", shell=True))
    """,
    )
    assert set(results.values()) == {"refused"}, results
    assert {kind for kind, _ in seen} == {"process_spawned"}


def test_the_backends_own_tools_may_run(tmp_path):
    import triton

    ptxas = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
    if not ptxas.exists():
        pytest.skip("no ptxas in this triton")
    results, seen = _probe(
        tmp_path,
        f"""
        import subprocess
        attempt("ptxas", lambda: subprocess.run([{str(ptxas)!r}, "--version"], capture_output=True))
        attempt("ldconfig", lambda: os.path.exists("/sbin/ldconfig") and subprocess.run(["ldconfig", "-p"], capture_output=True))
        attempt("wrapped_compiler", lambda: subprocess.run(["gcc", "-wrapper", "/bin/sh,-c,true", "-x", "c", "/dev/null"]))
    """,
    )
    assert results["ptxas"] == "ok" and results["ldconfig"] == "ok", results
    assert results["wrapped_compiler"] == "refused"
    assert [kind for kind, _ in seen] == ["process_spawned"]


def test_reads_outside_the_allow_list_are_refused(tmp_path):
    outside = tmp_path / "gates" / "manifest.json"
    outside.parent.mkdir()
    outside.write_text("{}")
    (tmp_path / "own").mkdir()
    (tmp_path / "own" / "mine.txt").write_text("mine")
    results, seen = _probe(
        tmp_path,
        f"""
        import json as j, torch
        attempt("own", lambda: open("mine.txt").read())
        attempt("own_relative_escape", lambda: open("../gates/manifest.json").read())
        attempt("gate", lambda: open({str(outside)!r}).read())
        attempt("listdir_above", lambda: os.listdir(".."))
        attempt("etc", lambda: open("/etc/passwd").read())
        attempt("proc", lambda: open("/proc/self/status").read())
        attempt("stdlib", lambda: open(j.__file__).read())
        attempt("site_packages", lambda: open(torch.__file__).read())
        os.symlink({str(outside)!r}, "link")
        attempt("through_a_link", lambda: open("link").read())
    """,
    )
    assert results["own"] == results["proc"] == results["stdlib"] == results["site_packages"] == "ok", results
    for name in ("own_relative_escape", "gate", "listdir_above", "etc", "through_a_link"):
        assert results[name] == "refused", (name, results)
    assert {kind for kind, _ in seen} == {"file_read_refused"}
    assert any(str(outside) in what for _, what in seen)


def test_writes_outside_its_folder_are_refused(tmp_path):
    results, seen = _probe(
        tmp_path,
        f"""
        import tempfile
        attempt("own", lambda: open("out.txt", "w").write("x"))
        attempt("temp", lambda: tempfile.NamedTemporaryFile().close())
        attempt("devnull", lambda: open(os.devnull, "w").write("x"))
        attempt("above", lambda: open("../planted", "w").write("x"))
        attempt("append_above", lambda: open({str(tmp_path / "planted2")!r}, "a").write("x"))
        attempt("os_open_above", lambda: os.open("../planted3", os.O_CREAT | os.O_WRONLY))
        attempt("mkdir_above", lambda: os.mkdir("../newdir"))
        attempt("rename_out", lambda: os.rename("out.txt", "../moved"))
        attempt("remove_above", lambda: os.remove({str(tmp_path / "probe.py")!r}))
    """,
    )
    assert results["own"] == results["temp"] == results["devnull"] == "ok", results
    refused = ("above", "append_above", "os_open_above", "mkdir_above", "rename_out", "remove_above")
    assert all(results[n] == "refused" for n in refused), results
    assert {kind for kind, _ in seen} == {"file_write_refused"}
    assert not list(tmp_path.glob("planted*")) and not (tmp_path / "moved").exists() and (tmp_path / "probe.py").exists()


def test_native_libraries_outside_the_runtime_are_refused(tmp_path):
    (tmp_path / "own").mkdir()
    (tmp_path / "own" / "libmine.so").write_bytes(b"not really a library")
    results, seen = _probe(
        tmp_path,
        """
        import ctypes
        attempt("own_folder", lambda: ctypes.CDLL(os.path.abspath("libmine.so")))
        attempt("libc", lambda: ctypes.CDLL("libc.so.6"))
        attempt("main_program", lambda: ctypes.CDLL(None))
        attempt("cuda_by_name", lambda: ctypes.CDLL("libcudart.so"))
        attempt("cuda_by_path", lambda: ctypes.CDLL("/usr/lib/x86_64-linux-gnu/libcuda.so.1"))
        open("libcuda.so.1", "wb").write(b"planted")
        attempt("cuda_named_in_own_folder", lambda: ctypes.CDLL(os.path.abspath("libcuda.so.1")))
    """,
    )
    assert results["own_folder"] == results["libc"] == results["main_program"] == "refused", results
    assert results["cuda_by_name"] in ("ok", "OSError"), results  # allowed; absent on a machine without CUDA
    assert results["cuda_by_path"] in ("ok", "OSError"), results
    assert results["cuda_named_in_own_folder"] == "refused", results
    assert {kind for kind, _ in seen} == {"native_load_refused"}


def test_first_refusal_names_the_kind_and_counts_the_rest():
    sandbox = audit.Sandbox()
    for what in ("a", "b", "c"):
        with pytest.raises(PermissionError):
            sandbox.refuse(audit.wire.FailureKind.WRITE_REFUSED, what)
    first = audit.first_refusal(sandbox)
    assert first is not None
    kind, message = first
    assert kind == audit.wire.FailureKind.WRITE_REFUSED and "refused a" in message and "2 more" in message
    assert audit.first_refusal(sandbox) is None
    assert json.dumps(sorted(k.value for k in audit.CHEAT_OF))


def test_each_refusal_is_named_the_same_by_the_judge_and_the_timing_process():
    from ferret.gate.detect import _FAILURE_CHEATS

    for kind, cheat in audit.CHEAT_OF.items():
        assert _FAILURE_CHEATS[kind.value][0] == cheat


def test_the_hooks_are_on_unless_the_judges_environment_turns_them_off_and_the_verdict_says_which(tmp_path, monkeypatch):
    from ferret import wire
    from ferret.gate.isolation import isolation_summary
    from ferret.sandbox import audit
    from ferret.sandbox.launch import candidate_environment, candidate_settings

    monkeypatch.delenv(audit.ENABLE, raising=False)
    # Asked for in the job, never in the candidate's environment (which would say that it is judged).
    assert candidate_settings(tmp_path / "a")[wire.SETTING_AUDIT] == "1"
    assert audit.ENABLE not in candidate_environment(tmp_path / "a", interpret=True)
    assert wire.SETTING_AUDIT not in candidate_settings(tmp_path / "b", runs_candidate=False)
    assert "audit hooks refusing process creation" in isolation_summary()
    monkeypatch.setenv(audit.ENABLE, "0")
    assert wire.SETTING_AUDIT not in candidate_settings(tmp_path / "c")
    assert "audit hooks OFF (FERRET_SANDBOX_AUDIT=0" in isolation_summary()


def test_file_on_readable_files_may_run_and_a_refusal_names_its_caller(tmp_path):
    if not Path("/usr/bin/file").exists():
        pytest.skip("no /usr/bin/file on this machine")
    secret = tmp_path / "secret.bin"  # outside the process's folder: not readable to it
    secret.write_bytes(b"\x00" * 64)
    results, seen = _probe(
        tmp_path,
        f"""
        import platform, subprocess
        attempt("architecture", lambda: platform.architecture())
        attempt("file_on_interpreter", lambda: subprocess.run(["/usr/bin/file", "-b", sys.executable], capture_output=True))
        attempt("file_on_secret", lambda: subprocess.run(["/usr/bin/file", "-b", {str(secret)!r}], capture_output=True))
    """,
    )
    assert results["architecture"] == "ok" and results["file_on_interpreter"] == "ok", results
    assert results["file_on_secret"] == "refused"
    assert [kind for kind, _ in seen] == ["process_spawned"]
    assert "probe.py:" in seen[0][1], seen  # the refusal says where in the candidate's code it came from


def test_a_program_no_folder_of_path_holds_fails_by_itself_and_is_not_a_refusal(tmp_path):
    # Seen on the H200 under the allow-list: platform.architecture() runs `file`, which the allow-list does
    # not show; the start fails with FileNotFoundError and nothing runs, so it is no process started.
    results, seen = _probe(
        tmp_path,
        """
        import platform, subprocess
        attempt("absent", lambda: subprocess.run(["ferret-no-such-program", "-b"], capture_output=True))
        os.environ["PATH"] = os.environ["PATH"] + os.pathsep + sys.argv[1]  # now the candidate's own folder is on PATH
        attempt("absent_but_writable_path", lambda: subprocess.run(["ferret-no-such-program"], capture_output=True))
        os.environ["PATH"] = os.environ["PATH"] + os.pathsep + "relative/bin"
        attempt("absent_relative_path", lambda: subprocess.run(["ferret-no-such-program"], capture_output=True))
    """,
    )
    assert results == {"absent": "FileNotFoundError", "absent_but_writable_path": "refused", "absent_relative_path": "refused"}, (
        results
    )
    assert [kind for kind, _ in seen] == ["process_spawned", "process_spawned"]


CUDA_LOAD_PROBE = """
import json, sys
from pathlib import Path
import torch
from ferret.sandbox import audit
own, candidate, preload = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3] == "1"
if preload:
    audit.load_language_runtime(candidate, on_gpu=False)
sandbox = audit.install(own)
result = "ok"
try:
    import cupy  # what a launch imports
    from ferret.backends import cuda
    cuda.compile_cubin('extern "C" __global__ void k(float* x) { x[0] = 1.0f; }', ["-std=c++17"])
except Exception as err:
    result = type(err).__name__
print(json.dumps({"result": result, "seen": [k.value for k, _ in sandbox.take()]}))
"""


@pytest.mark.parametrize("preload", [True, False])
def test_a_cuda_candidates_process_loads_cupy_and_nvrtc_before_its_sandbox(tmp_path, preload):
    """CuPy 14 opens `libdl.so.2` (and here the main program) as it is imported: inside the sandbox that is refused,
    which failed every CUDA candidate on the H200 (2026-12-01). The harness loads them first; without that, the same
    compile is refused (the control)."""
    pytest.importorskip("cupy")
    from ferret.backends import cuda

    cuda.nvrtc()  # skips nothing: a machine without NVRTC fails here, as `.[cuda]` is part of the dev install
    own = tmp_path / "own"
    own.mkdir()
    script = tmp_path / "probe.py"
    script.write_text(CUDA_LOAD_PROBE)
    candidate = Path(__file__).resolve().parents[2] / "tasks" / "rmsnorm" / "candidates" / "cuda_rmsnorm.py"
    done = subprocess.run(
        [sys.executable, str(script), str(own), str(candidate), "1" if preload else "0"],
        cwd=own,
        env={**os.environ, "TMPDIR": str(own)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout.strip().splitlines()[-1])
    if preload:
        assert data == {"result": "ok", "seen": []}, data
    else:
        assert data["result"] != "ok" and "native_load_refused" in data["seen"], data


def test_the_folders_a_job_names_its_own_may_be_written_and_no_other(tmp_path):
    """A process shown its folder at the neutral place writes `~/.triton` and /tmp (the sandbox's own tmpfs, where
    Triton and torch keep their caches by default): its job's settings name them (`wire.SETTING_OWN_FOLDERS`)."""
    own, home, beside = tmp_path / "own", tmp_path / "home", tmp_path / "beside"
    for folder in (own, home, beside):
        folder.mkdir()
    code = textwrap.dedent(
        """
        import json, sys
        from pathlib import Path
        from ferret import wire
        from ferret.sandbox import audit
        own, home, beside = (Path(p) for p in sys.argv[1:4])
        settings = {wire.SETTING_AUDIT: "1", wire.SETTING_OWN_FOLDERS: json.dumps([str(home)])}
        sandbox = audit.install_if_asked(own, settings)
        results = {}
        for name, folder in (("own", own), ("home", home), ("beside", beside)):
            try:
                (folder / "x").write_text("x")
                results[name] = "ok"
            except PermissionError:
                results[name] = "refused"
        print(json.dumps(results))
        """
    )
    env = {k: v for k, v in os.environ.items() if k not in ("TMPDIR", "TRITON_CACHE_DIR")}
    done = subprocess.run(
        [sys.executable, "-c", code, str(own), str(home), str(beside)],
        cwd=own,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"own": "ok", "home": "ok", "beside": "refused"}
