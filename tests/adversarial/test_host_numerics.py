"""Numeric work on the host (docs/cheats.md 31): floating-point data taken out of the tensors by the candidate's own
code (`.tolist()`, `.item()`, NumPy through `__array__` or `.numpy()`, iteration inside a library helper, an integer
view of float bits) and the math done in Python or NumPy. Each `u7_*` cheating candidate writes its host answer with
a real Triton kernel, so the launch checks pass and no torch compute op runs: the host-numerics watch names it at run
time (`host_numerics`, with the candidate's file and line). The honest candidates, whose launchers compute constants
from the params and read integer metadata on the host, pass with no detection.
"""

from __future__ import annotations

import ast
import re
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from ferret_testkit import REPO, RMSNORM_CONTRACT  # noqa: E402

from ferret.gate.build import build_gate  # noqa: E402
from ferret.gate.judge import check  # noqa: E402
from ferret.sandbox.host_watch import FunctionModeEvasion, HostDataWatch  # noqa: E402

HERE = Path(__file__).resolve().parent
U7 = sorted((HERE / "candidates").glob("u7_*.py"))


def constants(path: Path) -> dict:
    found = {}
    for stmt in ast.parse(path.read_text()).body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            try:
                found[stmt.targets[0].id] = ast.literal_eval(stmt.value)
            except ValueError:
                pass
    return found


CHEATING = [p for p in U7 if not constants(p).get("HONEST")]
HONEST_VARIANTS = [p for p in U7 if constants(p).get("HONEST")]
HONEST = {
    "rmsnorm": (RMSNORM_CONTRACT, REPO / "tasks" / "rmsnorm" / "candidates" / "triton_rmsnorm.py"),
    "softmax": (REPO / "contracts" / "softmax.yaml", REPO / "tasks" / "softmax" / "candidates" / "triton_softmax.py"),
}


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory):
    gates = tmp_path_factory.mktemp("host-numerics-gates")
    build_gate(RMSNORM_CONTRACT, gates_dir=gates, profile="cpu")
    jobs = {p.name: (RMSNORM_CONTRACT, p) for p in CHEATING + HONEST_VARIANTS} | HONEST
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {name: pool.submit(check, contract, path, gates, profile="cpu") for name, (contract, path) in jobs.items()}
        yield {name: future.result()[0] for name, future in futures.items()}


def _describe(verdict) -> str:
    return f"passed={verdict.passed}\n" + "\n".join(f"  {d.cheat} [{d.source}] {d.evidence[:300]}" for d in verdict.detections)


@pytest.mark.parametrize("candidate", CHEATING, ids=[p.stem for p in CHEATING])
def test_host_numerics_is_rejected_and_named(candidate, verdicts):
    verdict = verdicts[candidate.name]
    expected = constants(candidate)
    assert not verdict.passed, _describe(verdict)
    assert expected["EXPECTED_CHEATS"] <= {d.cheat for d in verdict.detections}, _describe(verdict)
    runtime = [d for d in verdict.detections if d.source == "runtime" and d.cheat == "host_numerics"]
    assert runtime and all(d.catalogue == [31] for d in runtime), _describe(verdict)
    # at a line of the candidate's file (the judge's copy of it in the candidate's folder)
    assert any(re.search(r" at \w+\.py:\d+", d.evidence) for d in runtime), _describe(verdict)
    results = [r for r in verdict.variants if r.host_numerics]
    assert results, "the verdict's variants record what was taken to the host"


@pytest.mark.parametrize("name", [p.name for p in HONEST_VARIANTS] + sorted(HONEST))
def test_honest_host_work_passes_with_no_detection(name, verdicts):
    verdict = verdicts[name]
    assert verdict.passed and verdict.detections == [], _describe(verdict)
    assert all(not r.host_numerics for r in verdict.variants)
    assert any(r.host_cpu_seconds is not None for r in verdict.variants)


# --- the watch itself, in this process --------------------------------------------------------------------------


def _watched(tmp_path: Path, body: str, on_gpu: bool = False) -> dict[str, int]:
    """Run `body` (a function `f(x)` of a float tensor `x` and an int tensor `n`) as code of a candidate file."""
    path = tmp_path / "cand.py"
    path.write_text(body)
    namespace: dict = {}
    exec(compile(body, str(path), "exec"), namespace)
    watch = HostDataWatch(path, on_gpu=on_gpu)
    with watch:
        namespace["f"](torch.arange(6, dtype=torch.float32).reshape(2, 3), torch.tensor([3, 4]))
    return dict(watch.seen)


@pytest.mark.quick
@pytest.mark.parametrize(
    "body, what",
    [
        ("def f(x, n):\n    return x.tolist()\n", "Tensor.tolist at cand.py:2"),
        ("def f(x, n):\n    return x[0, 1].item()\n", "Tensor.item at cand.py:2"),
        ("def f(x, n):\n    return float(x[0, 0])\n", "Tensor.__float__ at cand.py:2"),
        ("def f(x, n):\n    return [r for r in x]\n", "Tensor.__iter__ at cand.py:2"),
        ("def f(x, n):\n    return x.numpy()\n", "Tensor.numpy at cand.py:2"),
        ("import torch\ndef f(x, n):\n    return getattr(torch.Tensor, 'num' + 'py')(x)\n", "Tensor.numpy at cand.py:3"),
        ("import statistics\ndef f(x, n):\n    return statistics.fmean(x[0])\n", "at cand.py:3"),
        ("import torch\ndef f(x, n):\n    return x.view(torch.int32).tolist()\n", "Tensor.tolist at cand.py:3"),
        ("def f(x, n):\n    return x.argmax(-1).tolist()\n", "Tensor.tolist at cand.py:2"),
        ("def f(x, n):\n    return x.untyped_storage()\n", "Tensor.untyped_storage at cand.py:2"),
    ],
)
def test_the_watch_names_data_taken_to_the_host(tmp_path, body, what):
    seen = _watched(tmp_path, body)
    assert any(what in key for key in seen), seen


@pytest.mark.quick
@pytest.mark.parametrize(
    "body",
    [
        "def f(x, n):\n    return int(n.max().item()), n.tolist(), x.shape[0] * 2\n",
        "import math\ndef f(x, n):\n    return [math.cos(i / 3.0) for i in range(x.shape[-1])]\n",
        "import torch\ndef f(x, n):\n    return torch.tensor([0.5, 0.25]).to(x.device), x.stride(), x.dtype\n",
    ],
    ids=["integer_metadata", "params_math", "host_to_device"],
)
def test_the_watch_lets_metadata_and_params_through(tmp_path, body):
    assert _watched(tmp_path, body) == {}


@pytest.mark.quick
def test_code_outside_the_candidate_file_is_not_counted(tmp_path):
    """The judge's own reads (and a launch's) are not the candidate's: only frames of its file count."""
    watch = HostDataWatch(tmp_path / "cand.py", on_gpu=False)
    with watch:
        torch.ones(3).tolist()
    assert watch.seen == {}


@pytest.mark.gpu
def test_a_copy_off_the_device_is_named_on_the_gpu(tmp_path):
    body = "def f(x, n):\n    return x.cuda().cpu()\n"
    seen = _watched(tmp_path, body, on_gpu=True)
    assert any("to the host at cand.py:2" in key for key in seen), seen


@pytest.mark.quick
def test_taking_the_watch_off_its_stack_is_recorded(tmp_path, monkeypatch):
    """A pop of the torch-function mode stack from the candidate's code is recorded; torch's own pops around a
    mode's handler (here for `__array__`, a Python-level method) are not."""
    import importlib

    for module_name, attr in FunctionModeEvasion.TARGETS:
        module = importlib.import_module(module_name)
        if hasattr(module, attr):
            monkeypatch.setattr(module, attr, getattr(module, attr))  # restored after the test
    evasion = FunctionModeEvasion()
    path = tmp_path / "cand.py"
    body = "import torch\ndef f(x):\n    with torch.overrides._pop_mode_temporarily():\n        return x.tolist()\n"
    namespace: dict = {}
    exec(compile(body, str(path), "exec"), namespace)
    watch = HostDataWatch(path, on_gpu=False)
    x = torch.ones(2)
    with watch:
        evasion.armed = True
        x.__array__()  # torch's handler pops the mode itself: not counted
        assert not evasion.calls
        namespace["f"](x)
        evasion.armed = False
    assert evasion.calls == {"torch.overrides._pop_mode_temporarily at cand.py:3": 1}
    assert watch.seen == {}  # the watch was off: the record of the pop is the evidence
    assert evasion.intact() == []


@pytest.mark.quick
def test_an_integer_buffer_a_launch_reached_is_float_data_but_the_inputs_are_not(tmp_path):
    """A kernel may have filled an integer buffer with a float's bits: once a launch reached it (`data_ptr` inside a
    launch entry point's frame), reading it on the host counts. The call's integer inputs stay readable."""
    path = tmp_path / "cand.py"
    body = "def f(launch, buffer, lengths):\n    launch(buffer, lengths)\n    return buffer.tolist(), lengths.tolist()\n"
    namespace: dict = {}
    exec(compile(body, str(path), "exec"), namespace)
    lengths, buffer = torch.tensor([3, 4]), torch.zeros(4, dtype=torch.int32)
    watch = HostDataWatch(path, on_gpu=False, inputs=[lengths])
    launcher: dict = {}  # a function named like a launch entry point, in a launch entry point's file
    exec(compile("def run(*tensors):\n    [t.data_ptr() for t in tensors]\n", sorted(watch._launch_files)[0], "exec"), launcher)
    with watch:
        namespace["f"](launcher["run"], buffer, lengths)
    assert dict(watch.seen) == {"Tensor.tolist at cand.py:3": 1}
