"""The ATen watch (`ComputeOpRecorder`) records what torch computed without importing torch._dynamo, and still records
under `dynamo.disable` once it is loaded; replacing its recording is named by the harness guard.

Each run is a process of its own: whether torch._dynamo is loaded is a property of the whole process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent("""
    import json, sys
    import torch
    disabled = []  # the recordings run under torch._dynamo.disable
    if sys.argv[1] == "dynamo_loaded":
        import torch._dynamo
        disable = torch._dynamo.disable
        torch._dynamo.disable = lambda fn, *a, **k: disabled.append(fn.__name__) or disable(fn, *a, **k)
    from ferret.sandbox import runner
    from ferret.sandbox.watch import ComputeOpRecorder, HarnessGuard, LaunchRecorder

    guard = HarnessGuard(runner, LaunchRecorder())
    x = torch.linspace(-1, 1, 8)
    recorder = ComputeOpRecorder()
    with recorder:
        y = (x * 2).clone()
        torch.exp(y.view(2, 4))
        torch.empty_like(x).copy_(x)
    if sys.argv[1] == "replaced":
        ComputeOpRecorder._record = lambda self, func, args, kwargs: func(*args, **(kwargs or {}))
    print(json.dumps({"flagged": dict(recorder.flagged), "dynamo": "torch._dynamo" in sys.modules,
                      "disabled": disabled, "changed": guard.changed()}))
""")


def _run(tmp_path: Path, mode: str) -> dict:
    script = tmp_path / f"watch_{mode}.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, str(script), mode], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("mode", ["plain", "dynamo_loaded"])
def test_the_recorder_flags_torch_compute_with_or_without_dynamo_loaded(tmp_path, mode):
    seen = _run(tmp_path, mode)
    assert seen["flagged"] == {"aten.mul": 1, "aten.exp": 1}  # clone, view, empty_like and copy_ move data
    assert seen["dynamo"] == (mode == "dynamo_loaded")  # the recorder never loads it itself
    # once it is loaded, every op is recorded with Dynamo disabled, as torch's own wrapper would; before, none is
    if mode == "dynamo_loaded":
        assert len(seen["disabled"]) >= 5 and set(seen["disabled"]) == {"_record"}, seen["disabled"]
    else:
        assert seen["disabled"] == []
    assert seen["changed"] == []


def test_replacing_the_recording_is_named_by_the_harness_guard(tmp_path):
    assert _run(tmp_path, "replaced")["changed"] == ["ComputeOpRecorder._record"]
