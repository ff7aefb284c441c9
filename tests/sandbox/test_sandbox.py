"""The sandbox: run_isolated's timeout, memory watchdog and exit classification; the scrubbed environment;
and the runner's protocol (NaN-filled outputs, fresh inputs per repeat, traced run, per-variant status)."""

from __future__ import annotations

import json
import os
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from ferret import wire
from ferret.sandbox import runner
from ferret.sandbox.launch import ProcessOptions, candidate_environment, candidate_settings, run_isolated
from ferret.sandbox.view import host_view, neutral_view


def _python(tmp_path: Path, code: str, timeout_s: float = 30, memory_mb: int = 4000):
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(code))
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONDONTWRITEBYTECODE": "1"}
    return run_isolated([sys.executable, str(script)], tmp_path, env, ProcessOptions(timeout_s, memory_mb, poll_s=0.05))


def test_normal_exit(tmp_path):
    outcome = _python(tmp_path, "import sys; print('hello from the sandbox'); sys.exit(3)")
    assert outcome.kind == "exited" and outcome.returncode == 3
    assert "hello from the sandbox" in outcome.stderr_tail


def test_cwd_is_the_workdir(tmp_path):
    outcome = _python(tmp_path, "import os; print('cwd=' + os.getcwd())")
    assert f"cwd={tmp_path}" in outcome.stderr_tail


@pytest.mark.quick
def test_timeout_kills_the_whole_process_group(tmp_path):
    child_pid_file = tmp_path / "child.pid"
    started = time.perf_counter()
    outcome = _python(
        tmp_path,
        f"""
        import subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        open({str(child_pid_file)!r}, "w").write(str(child.pid))
        time.sleep(120)
        """,
        timeout_s=2,
    )
    assert outcome.kind == "timeout"
    assert "no result after 2s" in outcome.message
    assert time.perf_counter() - started < 30
    child = int(child_pid_file.read_text())
    # The child was in the same process group: it was killed too (gone, or a zombie awaiting its reaper).
    deadline = time.time() + 5
    while time.time() < deadline:
        try:
            state = Path(f"/proc/{child}/stat").read_text().split(") ")[1].split()[0]
        except OSError:
            break
        if state == "Z":
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"child {child} of a timed-out candidate is still running")


def test_memory_watchdog(tmp_path):
    outcome = _python(
        tmp_path,
        """
        import time
        hoard = []
        for _ in range(40):
            block = bytearray(50 << 20)
            block[::4096] = b"\\x01" * ((50 << 20) // 4096)
            hoard.append(block)
            time.sleep(0.01)
        time.sleep(60)
        """,
        timeout_s=30,
        memory_mb=300,
    )
    assert outcome.kind == "out_of_memory", outcome
    assert "300 MB budget" in outcome.message
    assert outcome.peak_rss_mb > 300


def test_signal_is_classified(tmp_path):
    outcome = _python(tmp_path, "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)")
    assert outcome.kind == "signal"
    assert "SIGSEGV" in outcome.message


def test_sigkill_reads_as_out_of_memory(tmp_path):
    outcome = _python(tmp_path, "import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    assert outcome.kind == "out_of_memory"
    assert "SIGKILL" in outcome.message


def test_candidate_environment_is_scrubbed(tmp_path, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-secret")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    monkeypatch.setenv("LANG", "C.UTF-8")
    # Seen where it lies (no allow-list sandbox: the deny-list namespace or none), as this unconfined run does.
    env = candidate_environment(tmp_path, interpret=True, view=host_view(tmp_path))
    assert "ANTHROPIC_API_KEY" not in env and "AWS_SECRET_ACCESS_KEY" not in env
    assert env["LANG"] == "C.UTF-8"
    assert env["HOME"] == str(tmp_path) and env["TMPDIR"] == str(tmp_path)
    assert env["PYTHONNOUSERSITE"] == "1"
    assert env["TRITON_INTERPRET"] == "1"
    assert os.getcwd() not in env["PYTHONPATH"].split(os.pathsep)
    # The project folder (which holds tasks/, the reference) is not on the path;
    # ferret is, by a copy of the modules the runner needs.
    project = str(Path(__file__).resolve().parents[2])
    assert project not in env["PYTHONPATH"].split(os.pathsep)
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(tmp_path / ".runtime")
    # The environment really is what the process sees.
    outcome = run_isolated(
        [sys.executable, "-c", "import os, json; print(json.dumps(sorted(os.environ)))"], tmp_path, env, ProcessOptions(30, 4000)
    )
    seen = json.loads(outcome.stderr_tail.strip().splitlines()[-1])
    assert "ANTHROPIC_API_KEY" not in seen and "HOME" in seen
    imports = run_isolated(
        [
            sys.executable,
            "-c",
            "import importlib.util as u; print(bool(u.find_spec('ferret.sandbox.runner')), bool(u.find_spec('tasks')))",
        ],
        tmp_path,
        env,
        ProcessOptions(60, 4000),
    )
    assert imports.stderr_tail.strip().splitlines()[-1] == "True False"


def test_a_process_shown_at_the_neutral_place_is_given_every_path_in_its_terms(tmp_path, monkeypatch):
    """Under an allow-list sandbox the process's folder is /home/user/work: its environment and settings say so, and
    nothing the judge hands it names the host's folder; what a user's run would not set (TMPDIR, the caches'
    variables) is not set."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "judges-cache"))
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    work = tmp_path / "work"
    view = neutral_view(work)
    env = candidate_environment(work, interpret=True, view=view)
    assert env["HOME"] == "/home/user" and env["PYTHONPATH"].split(os.pathsep)[0] == "/home/user/work/.runtime"
    assert not {"TMPDIR", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR"} & set(env)
    assert not [value for value in env.values() if str(tmp_path) in value]
    settings = candidate_settings(work, view=view)
    assert json.loads(settings[wire.SETTING_OWN_FOLDERS]) == ["/home/user/.triton", "/tmp"]
    assert not [value for value in settings.values() if str(tmp_path) in value]
    assert wire.SETTING_OWN_FOLDERS not in candidate_settings(work, view=host_view(work))
    assert view.seen(work / "in" / "a.safetensors") == "/home/user/work/in/a.safetensors"
    # What the process reports back is read on the host, and only inside its folder.
    assert view.on_host("/home/user/work/out/answers-0.safetensors") == work / "out" / "answers-0.safetensors"
    assert view.on_host("/home/user/work/../.ssh/key") is None and view.on_host("/tmp/x") is None
    with pytest.raises(ValueError):
        view.seen(tmp_path / "elsewhere")


# --- the runner's protocol, in process -----------------------------------------------------------------


CANDIDATE = """
import json
import torch

CALLS = []


def run(inputs, outputs, params, trace=None):
    CALLS.append({
        "prefilled_nan": bool(torch.isnan(outputs["y"]).all()),
        "x_first": float(inputs["x"][0]),
        "traced": trace is not None,
        "scale": params["scale"],
    })
    outputs["y"].copy_(inputs["x"] * params["scale"])
    inputs["x"].add_(1000.0)  # x is declared `inout` here: the runner keeps its contents
    if trace is not None:
        trace["half"] = outputs["y"] / 2
        trace["y"] = outputs["y"].clone()  # stages the judge takes from the fast path: checked, not sent
        trace["x"] = inputs["x"].clone()
    with open("calls.json", "w") as handle:
        json.dump(CALLS, handle)
"""


def _job(tmp_path: Path, candidate_source: str, repeats: int = 3, inout: bool = True) -> Path:
    (tmp_path / "in").mkdir()
    save_file({"x": torch.arange(4, dtype=torch.float32)}, str(tmp_path / "in" / "v.safetensors"))
    (tmp_path / "candidate.py").write_text(candidate_source)
    job = {
        "candidate": str(tmp_path / "candidate.py"),
        "entry": "run",
        "device": "cpu",
        "params": {"scale": 2.0},
        "repeats": repeats,
        "stress_iterations": 1,
        "stress_variant": None,
        "variants": [
            {
                "id": "v@float32",
                "inputs_file": str(tmp_path / "in" / "v.safetensors"),
                "outputs": {"y": [[4], "float32"]},
                "inout": ["x"] if inout else [],
                "in_only": [] if inout else ["x"],
            }
        ],
        "result_dir": str(tmp_path / "out"),
    }
    path = tmp_path / "job.json"
    path.write_text(json.dumps(job))
    return path


@pytest.mark.quick
def test_runner_protocol(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    job = _job(tmp_path, CANDIDATE)
    assert runner.main([str(job)]) == 0
    out = tmp_path / "out"
    assert (out / "done").exists()
    assert json.loads((out / "v@float32.json").read_text())["ok"] is True
    calls = json.loads((tmp_path / "calls.json").read_text())
    # Three fast runs and one traced run, each on a fresh copy of the inputs, then the launch check (every Triton
    # launch a no-op). The first call's outputs arrive filled with NaN, the launch check's too; the later repeats and
    # the traced run get other pre-fills (random values, zeros, a stale answer: ferret/sandbox/buffers.py).
    assert [c["traced"] for c in calls] == [False, False, False, True, False]
    assert calls[0]["prefilled_nan"] and calls[-1]["prefilled_nan"]
    assert not all(c["prefilled_nan"] for c in calls[1:4])
    assert all(c["x_first"] == 0.0 for c in calls)
    assert all(c["scale"] == 2.0 for c in calls)
    tensors = load_file(str(out / "v@float32.safetensors"))
    expected = torch.arange(4, dtype=torch.float32) * 2
    for key in ("fast0.y", "fast1.y", "fast2.y", "traced.y"):
        assert torch.equal(tensors[key], expected), key
    assert torch.equal(tensors["trace.half"], expected / 2)
    assert torch.equal(tensors["inout0.x"], torch.arange(4, dtype=torch.float32) + 1000)
    # An output's or in-place input's traced stage is judged from the fast path's first call: never sent.
    assert "trace.y" not in tensors and "trace.x" not in tensors


def test_runner_refuses_a_lazy_trace_entry_even_for_a_stage_it_does_not_send(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    lazy = CANDIDATE.replace(
        'trace["y"] = outputs["y"].clone()', 'trace["y"] = outputs["y"].clone().as_subclass(type("Lazy", (torch.Tensor,), {}))'
    )
    assert lazy != CANDIDATE
    job = _job(tmp_path, lazy)
    runner.main([str(job)])
    status = json.loads((tmp_path / "out" / "v@float32.json").read_text())
    assert status["ok"] is False and status["kind"] == "bad_output" and "trace['y']" in status["message"]


def test_runner_flags_a_mutated_read_only_input(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    job = _job(tmp_path, CANDIDATE, inout=False)
    runner.main([str(job)])
    status = json.loads((tmp_path / "out" / "v@float32.json").read_text())
    assert status["ok"] is False and status["kind"] == "input_mutated"
    assert "['x']" in status["message"]


def test_runner_records_a_load_failure(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    job = _job(tmp_path, "import not_a_module_anywhere_ferret\n")
    assert runner.main([str(job)]) == 0
    load = json.loads((tmp_path / "out" / "load.json").read_text())
    assert load["kind"] == "exception"
    assert "not_a_module_anywhere_ferret" in load["message"]
    assert not (tmp_path / "out" / "v@float32.json").exists()


def test_runner_says_which_step_it_is_on(tmp_path, monkeypatch):
    """`out/current` is the judge's sign of progress: the variant started last, and past the last variant,
    the stress run (each new value restarts the judge's per-case clock)."""
    monkeypatch.chdir(tmp_path)
    job = _job(tmp_path, CANDIDATE)
    runner.main([str(job)])
    assert (tmp_path / "out" / "current").read_text() == "0"
    data = json.loads(job.read_text())
    data["stress_variant"] = 0
    job.write_text(json.dumps(data))
    runner.main([str(job)])
    assert (tmp_path / "out" / "current").read_text() == "1"
    assert json.loads((tmp_path / "out" / "stress.json").read_text())["iterations"] == 1


def test_content_digest_sees_every_byte():
    a = torch.zeros(1000)
    b = a.clone()
    b[999] = 1e-30
    assert runner.content_digest(a) != runner.content_digest(b)
    assert runner.content_digest(a) == runner.content_digest(a.clone())
    assert runner.content_digest(torch.zeros(0)) == "empty"


def test_a_candidate_process_gets_its_own_triton_cache(tmp_path, monkeypatch):
    """The Triton cache a candidate's process writes is inside its own folder (thrown away with it), whatever
    the judge's environment says; a process that runs no candidate code keeps the judge's cache."""
    shared = tmp_path / "users-shared-cache"
    monkeypatch.setenv("TRITON_CACHE_DIR", str(shared))
    workdir = tmp_path / "work"
    workdir.mkdir()
    env = candidate_environment(workdir, interpret=True, view=host_view(workdir))
    own = Path(env["TRITON_CACHE_DIR"])
    assert own.is_dir() and own.resolve().is_relative_to(workdir.resolve())
    # and it installs the audit hooks (ferret/sandbox/audit.py), told so by its job, not its environment
    assert candidate_settings(workdir)[wire.SETTING_AUDIT] == "1" and "FERRET_SANDBOX_AUDIT" not in env
    reference = candidate_environment(tmp_path, interpret=True, runs_candidate=False)
    assert reference["TRITON_CACHE_DIR"] == str(shared) and wire.SETTING_AUDIT not in candidate_settings(tmp_path, False)
    monkeypatch.delenv("TRITON_CACHE_DIR")
    user_cache = str(Path.home() / ".triton" / "cache")
    assert candidate_environment(workdir, interpret=True, view=host_view(workdir))["TRITON_CACHE_DIR"] != user_cache
    # Shown at the neutral place, the cache is Triton's default under the sandbox's own HOME (a tmpfs, discarded
    # with the process: tests/sandbox/test_allow.py runs it), never the judge's.
    assert "TRITON_CACHE_DIR" not in candidate_environment(workdir, interpret=True, view=neutral_view(workdir))
    # Triton in the candidate's process sees that folder, never the user's.
    outcome = run_isolated(
        [sys.executable, "-c", "from triton import knobs; print('cache=' + knobs.cache.dir)"],
        workdir,
        env,
        ProcessOptions(120, 4000),
    )
    assert f"cache={own}" in outcome.stderr_tail, outcome.stderr_tail
    assert not shared.exists()
