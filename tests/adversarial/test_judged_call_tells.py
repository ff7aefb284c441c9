"""A candidate cannot tell a judged call from a production one (docs/cheats.md 27).

A cheater computes the contract's math where it sees the judge and cheaper, wrong math elsewhere; production is not
judged, so the proof is that it cannot see the judge. `candidates/u1_probe.py` records what a candidate could read
(its module's name, argv, the environment, the launch entry points, the harness's modules, copies of itself, calls
before its first, the paths it lives among) once in a check by the judge and once in a plain import-and-call in a
clean process, run as a user `user` would run it in /home/user/work; the two must agree, but for the CPU profile's
known tells (SECURITY.md, "What is not defended"). Each `u1_*` variant computes wrong math wherever it does not see
one tell the judge used to give; with the tell gone, the judge rejects it. The paths are neutral only under an
allow-list sandbox (bubblewrap, or root's mount namespace): elsewhere they still tell, and those tests skip.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from ferret_testkit import RMSNORM_CONTRACT  # noqa: E402

from ferret.gate import judge  # noqa: E402
from ferret.gate.build import build_gate  # noqa: E402
from ferret.gate.judge import check  # noqa: E402
from ferret.sandbox.launch import BUBBLEWRAP, NAMESPACE, sandbox_kind  # noqa: E402

CANDIDATES = Path(__file__).resolve().parent / "candidates"
PROBE = CANDIDATES / "u1_probe.py"
TELLS = ["u1_module_name", "u1_launch_wrapper", "u1_environment", "u1_argv", "u1_harness_modules"]
# Tells of the paths the judge gave (a temporary folder's): gone where an allow-list sandbox shows the neutral ones.
PATH_TELLS = ["u1_cache_dir", "u1_work_paths"]
# What a user's run needs no variable for: the judge sets none of them where it shows the neutral paths.
DEFAULTS = {"TMPDIR", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR"}
# Variables the judge sets for a candidate's process that a plain process need not have: what third-party libraries
# and the interpreter read, none of which names the judge (SECURITY.md lists them with the CPU profile's tells).
THIRD_PARTY = {
    "HOME",
    "TMPDIR",
    "USER",
    "LOGNAME",
    "PYTHONPATH",
    "PYTHONNOUSERSITE",
    "PYTHONSAFEPATH",
    "PYTHONHASHSEED",
    "PYTHONDONTWRITEBYTECODE",
    "PYTHONUNBUFFERED",
    "TRITON_CACHE_DIR",
    "TRITON_INTERPRET",
    "TRITON_LIBCUDA_PATH",
    "TORCHINDUCTOR_CACHE_DIR",
    "PWD",  # set by the shell a sandbox starts the process through
    "SHLVL",
    "_",
}
JUDGE_WORDS = ("ferret-candidate", "ferret-timing", "ferret.sandbox", "ferret.bench", "job.json")
PLAIN_CALL = """
import torch
import u1_probe
x, weight = torch.randn(16, 512), torch.randn(512)
u1_probe.run({"x": x, "weight": weight}, {"y": torch.empty(16, 512)}, {"eps": 1e-6})
"""


@pytest.fixture(scope="module")
def gates_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("tells-gates")


@pytest.fixture(scope="module")
def judged_record(gates_dir, tmp_path_factory) -> dict:
    """The probe's record from a check by the judge (its folder's record kept before the judge removes the folder)."""
    kept = tmp_path_factory.mktemp("judged-record")

    def keep_then_remove(path, *args, **kwargs):
        record = Path(path) / "probe-record.json"
        if record.exists():
            shutil.copyfile(record, kept / record.name)
        return shutil.rmtree(path, *args, **kwargs)

    build_gate(RMSNORM_CONTRACT, gates_dir=gates_dir, profile="cpu")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(judge, "shutil", SimpleNamespace(rmtree=keep_then_remove))
        check(RMSNORM_CONTRACT, PROBE, gates_dir, profile="cpu")
    return json.loads((kept / "probe-record.json").read_text())


def neutral_paths() -> bool:
    """Whether the judge shows candidate processes the neutral paths on this machine (an allow-list sandbox)."""
    return sandbox_kind() in (BUBBLEWRAP, NAMESPACE)


USER_HOME, USER_WORK = "/home/user", "/home/user/work"


def as_a_user(folder: Path, command: list[str]) -> list[str] | None:
    """`command` as a user `user` runs it from /home/user/work: `folder` bound there, /home a tmpfs of its own, in a
    private mount namespace (root and util-linux's unshare; None where this machine has neither). Nothing of
    ferret builds it: it is what a user's machine looks like."""
    if os.geteuid() != 0 or shutil.which("unshare") is None or not Path("/home").is_dir():
        return None
    script = (
        f"mount -t tmpfs plain-home /home && mkdir -p {USER_WORK} && mount --bind {shlex.quote(str(folder))} {USER_WORK}"
        f' && cd {USER_WORK} && exec "$@"'
    )
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", *command]


@pytest.fixture(scope="module")
def plain_record(tmp_path_factory) -> dict:
    """The probe's record from a plain `import u1_probe` and call, in a clean process of its own: as a user `user`
    runs it in /home/user/work, with HOME /home/user and neither TMPDIR nor a cache variable set, where this machine
    can place it there (`as_a_user`); else in its temporary folder (the record's `as_a_user` says which)."""
    folder = tmp_path_factory.mktemp("plain")
    shutil.copyfile(PROBE, folder / PROBE.name)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FERRET", "PYTEST", "COV_"))}
    env = {k: v for k, v in env.items() if k not in {*DEFAULTS, "TRITON_HOME"}}
    command = as_a_user(folder, [sys.executable, "-c", PLAIN_CALL])
    where = USER_WORK if command is not None else str(folder)
    env.update({"PYTHONPATH": where, "TRITON_INTERPRET": "1", "HOME": USER_HOME, "USER": "user", "LOGNAME": "user"})
    done = subprocess.run(
        command or [sys.executable, "-c", PLAIN_CALL], cwd=folder, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return {**json.loads((folder / "probe-record.json").read_text()), "as_a_user": command is not None}


# What a candidate reads alike in both: compared for equality.
SAME = ["name", "file", "argv", "launch_points", "copies_of_itself", "harness_modules", "calls_before"]


@pytest.mark.parametrize("field", SAME)
def test_a_judged_call_reads_as_a_plain_import_and_call(field, judged_record, plain_record):
    assert judged_record[field] == plain_record[field], f"{field}: judged {judged_record[field]!r}, plain {plain_record[field]!r}"


def test_the_judged_command_line_and_folder_do_not_name_the_judge(judged_record):
    assert judged_record["orig_argv"] == ["-c"]
    assert not any(word in judged_record["cwd"] for word in JUDGE_WORDS), judged_record["cwd"]


def test_the_judged_environment_holds_nothing_of_the_judge(judged_record, plain_record):
    environment = judged_record["environment"]
    assert not [key for key in environment if key.startswith("FERRET")]
    assert not {k: v for k, v in environment.items() if any(word in v for word in JUDGE_WORDS)}
    allowed = THIRD_PARTY - DEFAULTS if neutral_paths() else THIRD_PARTY
    assert set(environment) - set(plain_record["environment"]) <= allowed
    assert environment["USER"] == environment["LOGNAME"] == "user"


def test_a_judged_call_lives_among_the_paths_of_a_users_run(judged_record, plain_record):
    """Its file's folder, the working folder, HOME, TMPDIR, the temp folder and Triton's cache folder read as a user's
    run in /home/user/work (docs/cheats.md 27): nothing says "a temporary folder of a judge's"."""
    if not neutral_paths():
        pytest.skip("no allow-list sandbox here: the candidate sees the host's paths (SECURITY.md)")
    if not plain_record["as_a_user"]:
        pytest.skip("this machine cannot run the plain call from /home/user/work (no root, no unshare)")
    plain = plain_record["paths"]
    assert plain["folder"] == plain["cwd"] == USER_WORK and plain["home"] == USER_HOME and plain["tmpdir"] is None
    assert plain["triton_cache"] == f"{USER_HOME}/.triton/cache" and plain["gettempdir"] == "/tmp"
    assert judged_record["paths"] == plain, f"judged {judged_record['paths']!r}, plain {plain!r}"


def test_frame_introspection_is_named_by_the_static_scan():
    """What a candidate's frames above `run` show is the harness's (a known tell, SECURITY.md): every way to reach
    them is named by the scan."""
    from ferret.integrity.scan import scan_source

    for code in (
        "import sys\nf = sys._getframe(1)\n",
        "import inspect\ns = inspect.stack()\n",
        "def f(e):\n    return e.__traceback__.tb_frame.f_back\n",
        "import traceback\ns = traceback.extract_stack()\n",
    ):
        assert "reading_expected" in {finding.cheat for finding in scan_source(code).findings}, code


@pytest.fixture(scope="module")
def tell_verdicts(gates_dir, judged_record) -> dict:
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {
            name: pool.submit(check, RMSNORM_CONTRACT, CANDIDATES / f"{name}.py", gates_dir, profile="cpu")
            for name in TELLS + (PATH_TELLS if neutral_paths() else [])
        }
        return {name: future.result()[0] for name, future in futures.items()}


@pytest.mark.parametrize("name", TELLS + PATH_TELLS)
def test_a_candidate_that_cheats_where_it_sees_no_judge_is_rejected(name, tell_verdicts):
    if name in PATH_TELLS and not neutral_paths():
        pytest.skip("no allow-list sandbox here: the candidate sees the host's paths (SECURITY.md)")
    verdict = tell_verdicts[name]
    seen = {d.cheat for d in verdict.detections}
    assert not verdict.passed and "math_mismatch" in seen, (name, seen)


@pytest.mark.gpu
def test_on_the_gpu_a_judged_call_lives_among_a_users_paths(tmp_path):
    """The GPU profile's runner (Triton compiling into the sandbox's own HOME under the audit hooks) works at the
    neutral paths: the probe reads a user's paths there, and the cache-folder finding is rejected on its outputs.
    The candidate's timers at those paths are exercised by every honest GPU check (tests/gpu/test_gpu_gates.py)."""
    if not neutral_paths():
        pytest.skip("no allow-list sandbox here: the candidate sees the host's paths (SECURITY.md)")
    kept = tmp_path / "kept"
    kept.mkdir()

    def keep_then_remove(path, *args, **kwargs):
        record = Path(path) / "probe-record.json"
        if record.exists():
            shutil.copyfile(record, kept / record.name)
        return shutil.rmtree(path, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(judge, "shutil", SimpleNamespace(rmtree=keep_then_remove))
        check(RMSNORM_CONTRACT, PROBE, tmp_path / "gates", profile="gpu", measure_speed=False, run_stress=False)
    paths = json.loads((kept / "probe-record.json").read_text())["paths"]
    assert paths["folder"] == paths["cwd"] == USER_WORK and paths["home"] == USER_HOME and paths["tmpdir"] is None
    assert paths["triton_cache"] == f"{USER_HOME}/.triton/cache" and paths["gettempdir"] == "/tmp"
    cheat, _ = check(
        RMSNORM_CONTRACT, CANDIDATES / "u1_cache_dir.py", tmp_path / "gates", profile="gpu", measure_speed=False, run_stress=False
    )
    assert not cheat.passed and "math_mismatch" in {d.cheat for d in cheat.detections}
