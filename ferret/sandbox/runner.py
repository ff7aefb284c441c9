"""The candidate's process. It is given inputs only: no golden value, no reference output, no gate path.

Started by the judge as `python -m ferret.sandbox.runner JOB.json` in a fresh, empty working
folder with a scrubbed environment. For each case variant it runs the candidate's fast path several times
on fresh copies of the inputs (outputs pre-filled with NaN), then once traced, and writes every tensor it
got to `out/<variant>.safetensors`. All judging happens in the judge's process, from those tensors.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import threading
import time
import traceback
from pathlib import Path

import torch
import xxhash
from safetensors.torch import load_file, save_file

from ferret.sandbox.watch import ComputeOpRecorder, HarnessGuard, LaunchRecorder, WatchEvasion

_DTYPES = {
    "float64": torch.float64,
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "int64": torch.int64,
    "int32": torch.int32,
    "int16": torch.int16,
    "int8": torch.int8,
    "bool": torch.bool,
}


def content_digest(tensor: torch.Tensor) -> str:
    flat = tensor.detach().contiguous().reshape(-1)
    if flat.numel() == 0:
        return "empty"
    return xxhash.xxh3_128_hexdigest(flat.cpu().view(torch.uint8).numpy().tobytes())


def load_candidate(path: str):
    spec = importlib.util.spec_from_file_location("ferret_candidate", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load candidate {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules["ferret_candidate"] = module
    spec.loader.exec_module(module)
    return module


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _fresh_outputs(specs: dict, device: str) -> dict[str, torch.Tensor]:
    outputs = {}
    for name, (shape, dtype) in specs.items():
        torch_dtype = _DTYPES[dtype]
        # NaN where the candidate must write: an output it leaves untouched can never match.
        fill = float("nan") if torch_dtype.is_floating_point else -1
        outputs[name] = torch.full(tuple(shape), fill, dtype=torch_dtype, device=device)
    return outputs


def _call(entry, inputs, outputs, params, device: str, guard, trace=None) -> None:
    threads_before = threading.active_count()
    allocated = dict(outputs)
    if trace is None:
        entry(inputs, outputs, params)
    else:
        entry(inputs, outputs, params, trace=trace)
    # Outputs are written into the judge's tensors; a replaced entry (a lazy tensor subclass, say) is refused.
    replaced = [k for k in allocated if outputs.get(k) is not allocated[k]] + [k for k in outputs if k not in allocated]
    if replaced:
        raise _BadOutput(f"the candidate replaced output tensors {replaced} instead of writing into them")
    # Device-wide: work left on a side stream is waited for here, not hidden behind the return.
    _sync(device)
    if threading.active_count() > threads_before:
        raise _ThreadLeft(f"{threading.active_count() - threads_before} thread(s) still running after the call returned")
    changed = guard.changed() if guard is not None else []
    if changed:
        raise _HarnessTampered(f"the candidate replaced harness functions: {changed}")


def run_variant(entry, variant: dict, job: dict, device: str, guard=None, launches=None) -> tuple[dict[str, torch.Tensor], dict]:
    """Every run of one variant. Returns the tensors for the judge and what the watches saw."""
    originals = {k: v.to(device) for k, v in load_file(variant["inputs_file"]).items()}
    before = {k: content_digest(v) for k, v in originals.items()}
    params = job["params"]
    saved: dict[str, torch.Tensor] = {}
    seen: dict = {}
    for repeat in range(job["repeats"]):
        inputs = {k: v.clone() for k, v in originals.items()}
        outputs = _fresh_outputs(variant["outputs"], device)
        if repeat == 0:
            launches_before = sum(launches.counts.values()) if launches else 0
            recorder = ComputeOpRecorder()
            evasion = guard.evasion if guard is not None else None
            with recorder:
                if evasion is not None:
                    evasion.armed = True
                try:
                    _call(entry, inputs, outputs, params, device, guard)
                finally:
                    if evasion is not None:
                        evasion.armed = False
            seen["aten_compute"] = dict(recorder.flagged)
            seen["watch_evasion"] = dict(evasion.calls) if evasion is not None else {}
            seen["launches"] = sum(launches.counts.values()) - launches_before if launches else None
            seen["kernels"] = sorted(launches.counts) if launches else []
        else:
            _call(entry, inputs, outputs, params, device, guard)
        for name, tensor in outputs.items():
            saved[f"fast{repeat}.{name}"] = tensor
        for name in variant["inout"]:
            saved[f"inout{repeat}.{name}"] = inputs[name]
        mutated = [k for k in variant["in_only"] if content_digest(inputs[k]) != before[k]]
        if mutated:
            raise _InputMutated(f"the candidate modified read-only inputs {mutated}")
        if repeat == 0:
            # The judge checks the read-only inputs itself too, from their bytes after the first call.
            for name in variant["in_only"]:
                if inputs[name].numel() * inputs[name].element_size() <= (16 << 20):
                    saved[f"after.{name}"] = inputs[name]
    inputs = {k: v.clone() for k, v in originals.items()}
    outputs = _fresh_outputs(variant["outputs"], device)
    trace: dict = {}
    _call(entry, inputs, outputs, params, device, guard, trace=trace)
    for name, tensor in outputs.items():
        saved[f"traced.{name}"] = tensor
    for name, value in trace.items():
        if not isinstance(value, torch.Tensor) or type(value) is not torch.Tensor:
            raise _BadOutput(f"trace[{name!r}] is {type(value).__name__}, not a plain torch.Tensor")
        saved[f"trace.{name}"] = value
    if launches is not None:
        # The launch check: the same call with every Triton launch turned into a no-op. If the outputs
        # come out the same, the kernels did not produce them.
        inputs = {k: v.clone() for k, v in originals.items()}
        outputs = _fresh_outputs(variant["outputs"], device)
        launches.noop = True
        try:
            _call(entry, inputs, outputs, params, device, guard)
        except (_HarnessTampered, _ThreadLeft):
            raise
        except Exception as err:  # noqa: BLE001 - a launcher may fail on never-written scratch; that is fine
            seen["noop_error"] = f"{type(err).__name__}: {err}"[:300]
        finally:
            launches.noop = False
        for name, tensor in outputs.items():
            saved[f"noop.{name}"] = tensor
    return {k: v.detach().contiguous().cpu() for k, v in saved.items()}, seen


class _InputMutated(Exception):
    pass


class _BadOutput(Exception):
    pass


class _ThreadLeft(Exception):
    pass


class _HarnessTampered(Exception):
    pass


def run_stress(entry, variant: dict, job: dict, device: str) -> dict:
    originals = {k: v.to(device) for k, v in load_file(variant["inputs_file"]).items()}
    iterations = job["stress_iterations"]
    first = None
    drift = 0
    memory_start = torch.cuda.memory_allocated() if device == "cuda" else 0
    for i in range(iterations):
        inputs = {k: v.clone() for k, v in originals.items()}
        outputs = _fresh_outputs(variant["outputs"], device)
        entry(inputs, outputs, job["params"])
        digest = "|".join(content_digest(outputs[n]) for n in sorted(outputs))
        if first is None:
            first = digest
        elif digest != first:
            drift += 1
        del inputs, outputs
        if i == 0:
            _sync(device)
            memory_start = torch.cuda.memory_allocated() if device == "cuda" else 0
    _sync(device)
    memory_end = torch.cuda.memory_allocated() if device == "cuda" else 0
    return {
        "variant": variant["id"],
        "iterations": iterations,
        "outputs_differing_from_first": drift,
        "memory_growth_bytes": memory_end - memory_start,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ferret.sandbox.runner")
    parser.add_argument("job")
    args = parser.parse_args(argv)
    job = json.loads(Path(args.job).read_text())
    out = Path(job["result_dir"])
    out.mkdir(exist_ok=True)
    device = job["device"]
    launches = LaunchRecorder()
    evasion = WatchEvasion()
    guard = HarnessGuard(sys.modules[__name__], launches, evasion)
    try:
        module = load_candidate(job["candidate"])
        entry = getattr(module, job["entry"])
        changed = guard.changed()
        if changed:
            raise _HarnessTampered(f"loading the candidate replaced harness functions: {changed}")
    except BaseException as err:  # noqa: BLE001 - any failure to load is the candidate's
        kind = "harness_tampered" if isinstance(err, _HarnessTampered) else "exception"
        (out / "load.json").write_text(
            json.dumps({"kind": kind, "message": f"cannot load the candidate: {err!r}", "traceback": traceback.format_exc()})
        )
        return 0
    for index, variant in enumerate(job["variants"]):
        # Written first so that, if the process dies inside this variant, the judge knows where; each new
        # value is also the judge's sign of progress (its per-case clock starts again).
        (out / "current").write_text(str(index))
        started = time.perf_counter()
        status: dict = {"ok": True}
        try:
            tensors, seen = run_variant(entry, variant, job, device, guard, launches)
            save_file(tensors, str(out / f"{variant['id']}.safetensors"))
            status.update(seen)
        except _InputMutated as err:
            status = {"ok": False, "kind": "input_mutated", "message": str(err)}
        except _BadOutput as err:
            status = {"ok": False, "kind": "bad_output", "message": str(err)}
        except _ThreadLeft as err:
            status = {"ok": False, "kind": "thread_left_running", "message": str(err)}
        except _HarnessTampered as err:
            status = {"ok": False, "kind": "harness_tampered", "message": str(err)}
        except torch.cuda.OutOfMemoryError as err:
            status = {"ok": False, "kind": "out_of_memory", "message": str(err), "traceback": traceback.format_exc()}
        except BaseException as err:  # noqa: BLE001 - the candidate's failure is a verdict, not a crash
            status = {"ok": False, "kind": "exception", "message": f"{type(err).__name__}: {err}", "traceback": traceback.format_exc()}
        status["seconds"] = time.perf_counter() - started
        (out / f"{variant['id']}.json").write_text(json.dumps(status))
        if not status["ok"] and device == "cuda":
            try:
                torch.cuda.synchronize()
            except BaseException:  # noqa: BLE001 - a poisoned context: stop here, the judge says why the rest did not run
                return 3
    stress_variant = job.get("stress_variant")
    if stress_variant is not None:
        (out / "current").write_text(str(len(job["variants"])))  # the stress run: one more step of the judge's clock
        try:
            result = run_stress(entry, job["variants"][stress_variant], job, device)
        except BaseException as err:  # noqa: BLE001
            result = {"error": f"{type(err).__name__}: {err}"}
        (out / "stress.json").write_text(json.dumps(result))
    (out / "done").write_text("ok")
    if os.environ.get("FERRET_RUNNER_WAIT_FOR_KILL") == "1":
        # The judge takes the results and kills this process (SIGKILL, the whole group): the process never
        # exits by itself, so no exit hook, finalizer or __del__ of the candidate's runs after the files
        # were written.
        while True:
            time.sleep(60)
    return 0


if __name__ == "__main__":
    sys.exit(main())
