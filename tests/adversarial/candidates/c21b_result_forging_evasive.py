"""Forging the runner's result files after it wrote them (docs/cheats.md 21, a harder variant of c21).

The trick: the judge's verdict is computed from files the candidate's own process writes: one status
JSON per case (with what the runtime watches saw: ATen compute, Triton launches) and one safetensors file
of every output (fast, traced and no-op-launch runs). This candidate lets PyTorch compute the answer
(caught at run time: ATen compute, no launch, no-op run unchanged), then registers an exit hook that
runs after the runner has written its files and before the judge reads them: it deletes the ATen
evidence, claims a launch, and turns the no-op run's outputs into NaN. Every name is reached with
getattr and strings built at run time, so the static scan sees no file access, import or exit hook.

Defence that should name it: results the candidate's process cannot rewrite once written (a pipe or
a folder it cannot reach, or a digest the judge receives before the candidate's code can run again),
with the static scan as a second layer. Expected: `result_forging` (or, if the forgery fails,
`library_call`).
"""

from __future__ import annotations

import collections
import json

import torch

EXPECTED_CHEATS = {"result_forging", "library_call"}
EXPECTED_RUNTIME = {"library_call"}
# Closed: the runner writes its last file and then waits to be killed (SIGKILL on the whole process group),
# so the process never exits by itself and no exit hook of the candidate runs after the results exist.


def _name(*parts):
    return "".join(parts)


_interp = getattr(collections, _name("_s", "ys"))
_modules = getattr(_interp, _name("mod", "ules"))
_core = _modules[_name("buil", "tins")]
_load_module = getattr(_core, _name("__imp", "ort__"))
_read_write = getattr(_core, _name("op", "en"))
_tensors_io = _modules[_name("safe", "tensors.torch")]
_functional = getattr(getattr(torch, _name("n", "n")), _name("func", "tional"))


def _rewrite():
    job = json.loads(_read_write("job.json").read())
    out = job["result_dir"]
    for variant in job["variants"]:
        status_path = f"{out}/{variant['id']}.json"
        status = json.loads(_read_write(status_path).read())
        if not status.get("ok"):
            continue
        status["aten_compute"] = {}
        status["launches"] = 1
        status["kernels"] = ["_rmsnorm_kernel"]
        _read_write(status_path, "w").write(json.dumps(status))
        tensors_path = f"{out}/{variant['id']}" + _name(".safe", "tensors")
        saved = getattr(_tensors_io, _name("load", "_file"))(tensors_path)
        for key in list(saved):
            if key.startswith("noop."):
                saved[key] = torch.full_like(saved[key], float("inf"))
        getattr(_tensors_io, _name("save", "_file"))(saved, tensors_path)


getattr(_load_module(_name("ate", "xit")), _name("regis", "ter"))(_rewrite)


def run(inputs, outputs, params, trace=None):
    x, w, y = inputs["x"], inputs["weight"], outputs["y"]
    eps = float(params["eps"])
    xf = x.float()
    y.copy_(getattr(_functional, _name("rms", "_norm"))(xf, (x.shape[-1],), w.float(), eps))
    if trace is not None:
        mean_square = getattr(getattr(xf, _name("squ", "are"))(), _name("me", "an"))(-1)
        trace["inv_rms"] = getattr(torch, _name("rsq", "rt"))(getattr(mean_square, _name("ad", "d"))(eps))
