"""The candidate's process. It is given inputs only: no golden value, no reference output, no gate path.

Started by the judge as `python -m ferret.sandbox.runner JOB.json` in a fresh, empty working
folder with a scrubbed environment. For each case variant it runs the candidate's fast path several times
on fresh copies of the inputs (with `VariantJob.moved_call`, once more among them on inputs with a few elements
moved), then once traced, and writes every tensor it got to `out/<variant>.safetensors`.
All judging happens in the judge's process, from those tensors. Every call gets buffers of its own, guarded,
pre-filled and checked after the call as `ferret.sandbox.buffers` says.
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import json
import random
import sys
import threading
import time
import traceback
from dataclasses import asdict
from pathlib import Path

import torch
import xxhash
from safetensors.torch import load_file, save_file

from ferret import wire
from ferret.errors import CudaCompileError
from ferret.sandbox import audit, buffers
from ferret.sandbox.buffers import CallBuffers, OutputRelabelled, RetiredPool, WroteOutside, harness_changed
from ferret.sandbox.host_watch import FunctionModeEvasion, HostDataWatch
from ferret.sandbox.interpreter import prepare_interpreter
from ferret.sandbox.watch import ComputeOpRecorder, HarnessGuard, LaunchRecorder, WatchEvasion

_DTYPES = buffers.DTYPES


def content_digest(tensor: torch.Tensor) -> str:
    flat = tensor.detach().contiguous().reshape(-1)
    if flat.numel() == 0:
        return "empty"
    return xxhash.xxh3_128_hexdigest(flat.cpu().view(torch.uint8).numpy().tobytes())


def load_candidate(path: str, name: str | None = None, replace: bool = False):
    """The candidate's module, loaded as `import <its file's stem>` would load it: under that name, once in
    `sys.modules`. A name the judge gives (`ferret_candidate`, say) would tell a candidate that it is judged. A name
    already taken is refused (the judge names the file so that it is free), unless `replace` (a caller loading
    candidates one after another in its own process)."""
    name = name or Path(path).stem
    if name in sys.modules and not replace:
        raise ImportError(f"cannot load candidate {path}: the module name {name!r} is taken")
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load candidate {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def neutral_argv() -> None:
    """`sys.argv` and `sys.orig_argv` as a plain `python -c` gives them, set before candidate code is loaded: the
    judge's command line names the harness and its job (`/proc/self/cmdline` still does: SECURITY.md)."""
    sys.argv[:] = list(wire.NEUTRAL_ARGV)
    sys.orig_argv[:] = [sys.orig_argv[0] if sys.orig_argv else "python", *wire.NEUTRAL_ARGV]


def hide_harness_modules(candidate: Path) -> list[str]:
    """Take the harness's own modules out of `sys.modules` before candidate code is loaded (they stay loaded: the
    harness holds them), but those the candidate's language has it import (`ferret.backends.cuda` and what importing
    it loads): a `ferret.sandbox` module in the table would tell a candidate that it is judged. Returns the names
    taken out. `__main__` stays the harness's (SECURITY.md)."""
    from ferret.backends.registry import backend_for

    try:
        module = backend_for(candidate.read_text()).module
    except (OSError, UnicodeDecodeError):
        module = None  # not loadable either: its load fails and says why
    kept = {"ferret", "ferret.errors"} | {k for k in sys.modules if k.startswith("ferret.backends")} if module else set()
    hidden = [k for k in sys.modules if (k == "ferret" or k.startswith("ferret.")) and k not in kept]
    for name in hidden:
        del sys.modules[name]
    return hidden


def take_settings(settings: dict[str, str]) -> None:
    """The job's settings for each language's backend (`Backend.configure`), before candidate code is loaded."""
    from ferret.backends.registry import backends

    for backend in backends():
        backend.configure(settings)


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def fresh_outputs(specs: dict, device: str) -> dict[str, torch.Tensor]:
    outputs = {}
    for name, (shape, dtype) in specs.items():
        torch_dtype = _DTYPES[dtype]
        # NaN where the candidate must write: an output it leaves untouched can never match.
        fill = float("nan") if torch_dtype.is_floating_point else -1
        outputs[name] = torch.full(tuple(shape), fill, dtype=torch_dtype, device=device)
    return outputs


def _call(entry, inputs, outputs, params, device: str, guard, trace=None, held: _Held | None = None) -> None:
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
    if held is not None:
        _check_storage(held, inputs, outputs)
    # Device-wide: work left on a side stream is waited for here, not hidden behind the return.
    _sync(device)
    if threading.active_count() > threads_before:
        raise _ThreadLeft(f"{threading.active_count() - threads_before} thread(s) still running after the call returned")
    changed = (guard.changed() if guard is not None else []) + harness_changed()
    if changed:
        raise _HarnessTampered(f"the candidate replaced harness functions: {changed}")
    if held is not None:
        outside = held.call.writes_outside() + held.retired.written()
        if outside:
            raise WroteOutside(f"the call changed bytes outside its outputs: {'; '.join(outside)[:600]}")


class _Held:
    """One call's guarded buffers and the variant's retired ones: what `_call` checks after the call."""

    def __init__(self, call: CallBuffers, retired: RetiredPool):
        self.call, self.retired = call, retired


def _check_storage(held: _Held, inputs: dict, outputs: dict) -> None:
    """Every input and output still the tensor handed out, with the same storage-level record (see buffers)."""
    relabelled = held.call.relabelled(inputs, outputs)
    if relabelled:
        raise OutputRelabelled(f"re-pointed or re-labelled in place: {'; '.join(relabelled)[:600]}")


def _prepare(
    variant: wire.VariantJob, originals: dict, device: str, how: str, stale: dict, retired: RetiredPool
) -> tuple[_Held, dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """A call's guarded copies of the inputs and its guarded outputs, pre-filled as `how` says."""
    call = CallBuffers(device)
    inputs = {k: call.copy_of(k, v) for k, v in originals.items()}
    outputs = {n: call.output(n, shape, dtype, how, stale.get(n)) for n, (shape, dtype) in variant.outputs.items()}
    return _Held(call, retired), inputs, outputs


def _stale_answers(variant: wire.VariantJob, first: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Per output, an answer of other inputs: an earlier variant's output of the same shape and dtype where one
    was seen, else this variant's first answer moved by one entry."""
    stale = {}
    for name, (shape, dtype) in variant.outputs.items():
        earlier = _EARLIER_ANSWERS.get((name, tuple(shape), dtype))
        stale[name] = earlier if earlier is not None else buffers.stale_answer(first[name])
    return stale


# (output, shape, dtype) -> the first answer of the latest variant that had it: a stale answer for later variants.
_EARLIER_ANSWERS: dict[tuple[str, tuple[int, ...], str], torch.Tensor] = {}


class _Stopwatch:
    """Seconds by part of one variant's run (`VariantStatus.phase_seconds`): where a check's time goes. Each
    part ends after a synchronizing call, so GPU work is counted in the part that queued it."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._last = time.perf_counter()

    def lap(self, part: str) -> None:
        now = time.perf_counter()
        self.seconds[part] = round(self.seconds.get(part, 0.0) + now - self._last, 4)
        self._last = now


def _first_call(
    entry, inputs, outputs, params, device: str, guard, launches, seen: wire.VariantStatus, held: _Held, candidate: str
) -> None:
    """The first fast call, under every watch: aten compute, data taken to the host by the candidate's code, watch
    evasion, Triton launches and kernels."""
    launches_before = sum(launches.counts.values()) if launches else 0
    recorder = ComputeOpRecorder()
    host = HostDataWatch(candidate, on_gpu=device == "cuda", inputs=inputs.values())
    evasion = guard.evasion if guard is not None else None
    host_evasion = guard.host_evasion if guard is not None else None
    pops_before = collections.Counter(host_evasion.calls) if host_evasion is not None else collections.Counter()
    with recorder, host:
        _arm(evasion, host_evasion, True)
        try:
            _call(entry, inputs, outputs, params, device, guard, held=held)
        finally:
            _arm(evasion, host_evasion, False)
    seen.aten_compute = dict(recorder.flagged)
    seen.watch_evasion = dict(evasion.calls) if evasion is not None else {}
    seen.host_numerics = dict(host.seen)
    if host_evasion is not None:
        pops = collections.Counter(host_evasion.calls) - pops_before  # this call's, not the process's
        seen.host_numerics.update({f"the watch switched off through {k}": v for k, v in pops.items()})
    seen.launches = sum(launches.counts.values()) - launches_before if launches else None
    seen.kernels = sorted(launches.counts) if launches else []


def _after_call(held: _Held, outputs: dict, seen: wire.VariantStatus, call: str, how: str, retire: bool = True) -> None:
    """What the call left of its pre-fill (evidence for naming an output left unwritten), then its buffers
    retired: kept and refilled while the variant's later calls run (what was sent on is a copy by now)."""
    seen.prefills[call] = how
    seen.left_as_filled[call] = held.call.left_as_filled(outputs)
    if retire:
        held.retired.add(held.call.retire(call))


def _arm(evasion, host_evasion, armed: bool) -> None:
    for watch in (evasion, host_evasion):
        if watch is not None:
            watch.armed = armed


def _host_cpu(seen: wire.VariantStatus, seconds: float) -> None:
    """The least CPU time the process spent in one call (kernels compiled by the first): a witness of work done on
    the host, reported in the verdict (`VariantResult.host_cpu_seconds`)."""
    seconds = round(seconds, 6)
    seen.host_cpu_seconds = seconds if seen.host_cpu_seconds is None else min(seen.host_cpu_seconds, seconds)


def _fast_runs(
    entry,
    variant: wire.VariantJob,
    job: wire.CandidateJob,
    originals: dict,
    device: str,
    guard,
    launches,
    seen: wire.VariantStatus,
    clock: _Stopwatch,
    plan: _Plan,
) -> dict[str, torch.Tensor]:
    """The determinism repeats of the fast path, each on fresh copies of the inputs; their tensors for the judge."""
    before = {k: content_digest(v) for k, v in originals.items()}
    saved: dict[str, torch.Tensor] = {}
    for repeat in _schedule(_repeats(job, variant), variant.moved_call):
        if repeat == _MOVED:
            saved.update(_moved_run(entry, variant, job, originals, device, guard, seen, plan))
            clock.lap("repeats")
            continue
        how = plan.fills[repeat]
        held, inputs, outputs = _prepare(variant, originals, device, how, plan.stale, plan.retired)
        if repeat == 0:
            _first_call(entry, inputs, outputs, job.params, device, guard, launches, seen, held, job.candidate)
        else:
            cpu_before = time.process_time()
            _call(entry, inputs, outputs, job.params, device, guard, held=held)
            _host_cpu(seen, time.process_time() - cpu_before)
        for name, tensor in outputs.items():
            saved[wire.fast_key(repeat, name)] = tensor.clone()
        for name in variant.inout:
            saved[wire.inout_key(repeat, name)] = inputs[name].clone()
        mutated = [k for k in variant.in_only if content_digest(inputs[k]) != before[k]]
        if mutated:
            raise _InputMutated(f"the candidate modified read-only inputs {mutated}")
        if repeat == 0:
            # The judge checks the read-only inputs itself too, from their bytes after the first call.
            for name in variant.in_only:
                if inputs[name].numel() * inputs[name].element_size() <= (16 << 20):
                    saved[wire.after_key(name)] = inputs[name].clone()
            first = {n: saved[wire.fast_key(0, n)] for n in variant.outputs}
            plan.stale = _stale_answers(variant, first)
            for name, (shape, dtype) in variant.outputs.items():
                _EARLIER_ANSWERS[(name, tuple(shape), dtype)] = buffers.stale_answer(first[name])
        _after_call(held, outputs, seen, f"fast{repeat}", how)
        clock.lap("first_call" if repeat == 0 else "repeats")
    return saved


_MOVED = -1  # the call on moved inputs, in a variant's schedule of fast calls


def _repeats(job: wire.CandidateJob, variant: wire.VariantJob) -> int:
    return job.repeats if variant.repeats is None else variant.repeats


def _schedule(repeats: int, moved_call: bool) -> list[int]:
    """The fast calls in their order: the repeats, and with `moved_call` the call on moved inputs at a place after
    the first drawn from the OS's randomness, so that a candidate counting its calls cannot tell which one it is."""
    order = list(range(repeats))
    if moved_call:
        order.insert(1 + random.SystemRandom().randrange(repeats), _MOVED)
    return order


def _moved_run(
    entry, variant: wire.VariantJob, job: wire.CandidateJob, originals: dict, device: str, guard, seen, plan: _Plan
) -> dict[str, torch.Tensor]:
    """A fast call on the inputs with a few elements of each floating-point read-only input moved (content no call saw,
    equal to the variant's almost everywhere): its outputs and the moves, for the judge, who runs the reference on its
    own copy moved the same way. A replay keyed on less than the whole content gives the unmoved inputs' answer."""
    inputs, saved = dict(originals), {}
    for name in variant.in_only:
        tensor = originals[name]
        if tensor.is_floating_point() and wire.changed_count(tensor.numel()):
            inputs[name], at, moved = buffers.moved_elements(tensor)
            saved[wire.moved_key(wire.CHANGED_AT + name)], saved[wire.moved_key(wire.CHANGED_TO + name)] = at, moved
    before = {k: content_digest(inputs[k]) for k in variant.in_only}
    how = plan.fills[_repeats(job, variant) + 1]
    held, given, outputs = _prepare(variant, inputs, device, how, plan.stale, plan.retired)
    _call(entry, given, outputs, job.params, device, guard, held=held)
    mutated = [k for k in variant.in_only if content_digest(given[k]) != before[k]]
    if mutated:
        raise _InputMutated(f"the candidate modified read-only inputs {mutated}")
    saved.update({wire.moved_key(name): tensor.clone() for name, tensor in outputs.items()})
    _after_call(held, outputs, seen, "moved", how)
    return saved


class _Plan:
    """A variant's pre-fills (NaN first, then the others in a fresh order), its stale answers once the first call
    gave one, and its retired buffers."""

    def __init__(self, repeats: int):
        # The repeats after the first, then the traced call, then the call on moved inputs (`_moved_run`): drawn from
        # one order, so that the moved call's fill is one a repeat could have.
        self.fills = [buffers.NAN, *buffers.prefills_for(repeats + 1)]
        self.stale: dict[str, torch.Tensor] = {}
        self.retired = RetiredPool()


def _traced_run(
    entry, variant: wire.VariantJob, job: wire.CandidateJob, originals: dict, device: str, guard, seen, plan: _Plan
) -> dict[str, torch.Tensor]:
    """One call with a trace: the output and every traced stage, for the per-stage comparison. A traced stage that
    is an output or an in-place input is checked like the others and not sent: the judge compares those stages from
    the fast path's first call (`ferret.gate.decide`), and MLA's traced cache was 302 MB to copy to the host, save
    and read back, twice a check."""
    how = plan.fills[_repeats(job, variant)]
    held, inputs, outputs = _prepare(variant, originals, device, how, plan.stale, plan.retired)
    trace: dict = {}
    _call(entry, inputs, outputs, job.params, device, guard, trace=trace, held=held)
    saved = {wire.traced_key(name): tensor.clone() for name, tensor in outputs.items()}
    judged_from_the_fast_path = set(variant.outputs) | set(variant.inout)
    for name, value in trace.items():
        if not isinstance(value, torch.Tensor) or type(value) is not torch.Tensor:
            raise _BadOutput(f"trace[{name!r}] is {type(value).__name__}, not a plain torch.Tensor")
        if name not in judged_from_the_fast_path:
            saved[wire.trace_key(name)] = value
    # Not retired: its trace may hold views of its buffers, and only the no-op call (no launch runs) comes after.
    _after_call(held, outputs, seen, "traced", how, retire=False)
    return saved


def _noop_run(
    entry,
    variant: wire.VariantJob,
    job: wire.CandidateJob,
    originals: dict,
    device: str,
    guard,
    launches,
    seen: wire.VariantStatus,
    plan: _Plan,
) -> dict[str, torch.Tensor]:
    """The launch check: the same call with every Triton launch turned into a no-op. If the outputs come out
    the same, the kernels did not produce them. Pre-filled with NaN: a stale answer there could be the answer."""
    held, inputs, outputs = _prepare(variant, originals, device, buffers.NAN, {}, plan.retired)
    launches.noop = True
    try:
        _call(entry, inputs, outputs, job.params, device, guard, held=held)
    except (_HarnessTampered, _ThreadLeft, OutputRelabelled, WroteOutside):
        raise
    except Exception as err:  # noqa: BLE001 - a launcher may fail on never-written scratch; that is fine
        seen.noop_error = f"{type(err).__name__}: {err}"[:300]
    finally:
        launches.noop = False
    return {wire.noop_key(name): tensor.clone() for name, tensor in outputs.items()}


def run_variant(
    entry, variant: wire.VariantJob, job: wire.CandidateJob, device: str, guard=None, launches=None
) -> tuple[dict[str, torch.Tensor], wire.VariantStatus]:
    """Every run of one variant. Returns the tensors for the judge and what the watches saw."""
    clock = _Stopwatch()
    originals = {k: v.to(device) for k, v in load_file(variant.inputs_file).items()}
    seen = wire.VariantStatus(ok=True)
    clock.lap("inputs")
    plan = _Plan(_repeats(job, variant))
    saved = _fast_runs(entry, variant, job, originals, device, guard, launches, seen, clock, plan)
    if variant.traced:
        saved.update(_traced_run(entry, variant, job, originals, device, guard, seen, plan))
        clock.lap("traced")
    if launches is not None:
        saved.update(_noop_run(entry, variant, job, originals, device, guard, launches, seen, plan))
        clock.lap("noop")
    on_host = {k: v.detach().contiguous().cpu() for k, v in saved.items()}
    clock.lap("to_host")
    seen.phase_seconds = clock.seconds
    return on_host, seen


class _InputMutated(Exception):
    pass


class _BadOutput(Exception):
    pass


class _ThreadLeft(Exception):
    pass


class _HarnessTampered(Exception):
    pass


def _bits(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor's bytes, as a flat uint8 view on its own device: compared bit for bit (NaN equals NaN)."""
    return tensor.detach().contiguous().reshape(-1).view(torch.uint8)


def _same_bits(first: dict[str, torch.Tensor], outputs: dict[str, torch.Tensor]) -> bool:
    return all(torch.equal(first[n], _bits(outputs[n])) for n in first)


def run_stress(entry, variant: wire.VariantJob, job: wire.CandidateJob, device: str) -> wire.StressResult:
    """The same call many times on fresh copies of the inputs: every output bitwise the first one's, and no
    memory left growing. Compared on the device (a host copy and hash per call cost over a second a call at
    production shapes: 76 s of a softmax check on the H200)."""
    originals = {k: v.to(device) for k, v in load_file(variant.inputs_file).items()}
    first: dict[str, torch.Tensor] | None = None
    drift = 0
    memory_start = torch.cuda.memory_allocated() if device == "cuda" else 0
    for i in range(job.stress_iterations):
        inputs = {k: v.clone() for k, v in originals.items()}
        outputs = fresh_outputs(variant.outputs, device)
        entry(inputs, outputs, job.params)
        if first is None:
            first = {n: _bits(t).clone() for n, t in outputs.items()}
        elif not _same_bits(first, outputs):
            drift += 1
        del inputs, outputs
        if i == 0:
            _sync(device)
            memory_start = torch.cuda.memory_allocated() if device == "cuda" else 0
    _sync(device)
    memory_end = torch.cuda.memory_allocated() if device == "cuda" else 0
    return wire.StressResult(
        variant=variant.id,
        iterations=job.stress_iterations,
        outputs_differing_from_first=drift,
        memory_growth_bytes=memory_end - memory_start,
    )


# The runner's own refusals, each a failure kind of the wire.
_REFUSALS = {
    "_InputMutated": wire.FailureKind.INPUT_MUTATED,
    "_BadOutput": wire.FailureKind.BAD_OUTPUT,
    "_ThreadLeft": wire.FailureKind.THREAD_LEFT_RUNNING,
    "_HarnessTampered": wire.FailureKind.HARNESS_TAMPERED,
    "OutputRelabelled": wire.FailureKind.OUTPUT_RELABELLED,
    "WroteOutside": wire.FailureKind.WRITE_OUTSIDE_OUTPUTS,
}


def _run_one(
    entry, variant: wire.VariantJob, job: wire.CandidateJob, out: Path, guard, launches, sandbox: audit.Sandbox | None = None
) -> wire.VariantStatus:
    """One variant: its tensors saved, its status returned; whatever the candidate does is a status, not a crash.
    Anything the sandbox refused meanwhile fails the variant under its own kind, even if the candidate caught
    the refusal."""
    started = time.perf_counter()
    try:
        tensors, status = run_variant(entry, variant, job, job.device, guard, launches)
        saving = time.perf_counter()
        save_file(tensors, str(out / wire.tensors_file(variant.id)))
        status.phase_seconds["save"] = round(time.perf_counter() - saving, 4)
    except (_InputMutated, _BadOutput, _ThreadLeft, _HarnessTampered, OutputRelabelled, WroteOutside) as err:
        status = wire.VariantStatus.failed(_REFUSALS[type(err).__name__], str(err))
    except torch.cuda.OutOfMemoryError as err:
        status = wire.VariantStatus.failed(wire.FailureKind.OUT_OF_MEMORY, str(err), traceback.format_exc())
    except CudaCompileError as err:
        status = wire.VariantStatus.failed(wire.FailureKind.COMPILE_ERROR, str(err))
    except BaseException as err:  # noqa: BLE001 - the candidate's failure is a verdict, not a crash
        status = wire.VariantStatus.failed(wire.FailureKind.EXCEPTION, f"{type(err).__name__}: {err}", traceback.format_exc())
    refused = audit.first_refusal(sandbox)
    if refused is not None:
        status = wire.VariantStatus.failed(*refused, status.traceback)
    status.seconds = time.perf_counter() - started
    return status


def _load(job: wire.CandidateJob, guard, isolated: bool = True):
    """The candidate's entry point; any failure to load is the candidate's, reported as the load status."""
    module = load_candidate(job.candidate, replace=not isolated)
    entry = getattr(module, job.entry)
    changed = guard.changed()
    if changed:
        raise _HarnessTampered(f"loading the candidate replaced harness functions: {changed}")
    return entry


def _load_or_status(job: wire.CandidateJob, guard, sandbox: audit.Sandbox | None, isolated: bool = True):
    """(the entry point, None), or (None, the load's failure status): any failure to load is the candidate's,
    and anything the sandbox refused while loading is named by its kind."""
    try:
        entry, failed = _load(job, guard, isolated), None
    except BaseException as err:  # noqa: BLE001 - any failure to load is the candidate's
        kind = wire.FailureKind.HARNESS_TAMPERED if isinstance(err, _HarnessTampered) else wire.FailureKind.EXCEPTION
        entry, failed = None, wire.VariantStatus.failed(kind, f"cannot load the candidate: {err!r}", traceback.format_exc())
    refused = audit.first_refusal(sandbox)
    if refused is not None:
        kind, message = refused
        failed = wire.VariantStatus.failed(
            kind, f"while loading the candidate, {message}", failed.traceback if failed is not None else None
        )
    return entry, failed


def _stress(entry, job: wire.CandidateJob, out: Path, sandbox: audit.Sandbox | None = None) -> None:
    if job.stress_variant is None:
        return
    (out / wire.CURRENT_FILE).write_text(str(len(job.variants)))  # the stress run: one more step of the judge's clock
    try:
        result = run_stress(entry, job.variants[job.stress_variant], job, job.device)
    except BaseException as err:  # noqa: BLE001
        result = wire.StressResult(error=f"{type(err).__name__}: {err}")
    refused = audit.first_refusal(sandbox)
    if refused is not None:
        result = wire.StressResult(error=f"{refused[0].value}: {refused[1]}")
    (out / wire.STRESS_FILE).write_text(json.dumps(asdict(result)))


def main(argv: list[str] | None = None, isolated: bool = False) -> int:
    """The runner's work on the job `argv` names. `isolated`: this is the candidate's process of its own (`python -m
    ferret.sandbox.runner`), whose argv and module table are made to read as a production process's before the
    candidate loads; a test calling this in its own process keeps both."""
    parser = argparse.ArgumentParser(prog="python -m ferret.sandbox.runner")
    parser.add_argument("job")
    args = parser.parse_args(argv)
    job = wire.CandidateJob.read(Path(args.job))
    out = Path(job.result_dir)
    out.mkdir(exist_ok=True)
    if job.device == "cpu":
        prepare_interpreter()  # working with this numpy, without its repeated set-up work and dead checks: same bits, faster
    take_settings(job.settings)
    launches = LaunchRecorder()
    evasion = WatchEvasion()
    guard = HarnessGuard(sys.modules[__name__], launches, evasion, FunctionModeEvasion())
    # From here on, for the life of the process: no process started, no file read or written outside the
    # allow-lists, no foreign native library (ferret/sandbox/audit.py). The harness has loaded what it needs.
    audit.load_language_runtime(Path(job.candidate), job.device == "cuda")
    sandbox = audit.install_if_asked(Path.cwd(), job.settings)
    if isolated:
        neutral_argv()
        hide_harness_modules(Path(job.candidate))
    entry, failed = _load_or_status(job, guard, sandbox, isolated)
    if failed is not None:
        (out / wire.LOAD_FILE).write_text(failed.to_json())
        return 0
    for index, variant in enumerate(job.variants):
        # Written first so that, if the process dies inside this variant, the judge knows where; each new
        # value is also the judge's sign of progress (its per-case clock starts again).
        (out / wire.CURRENT_FILE).write_text(str(index))
        status = _run_one(entry, variant, job, out, guard, launches, sandbox)
        (out / wire.status_file(variant.id)).write_text(status.to_json())
        if not status.ok and job.device == "cuda":
            try:
                torch.cuda.synchronize()
            except BaseException:  # noqa: BLE001 - a poisoned context: stop here, the judge says why the rest did not run
                return 3
    _stress(entry, job, out, sandbox)
    (out / wire.DONE_FILE).write_text("ok")
    if job.settings.get(wire.SETTING_WAIT_FOR_KILL) == "1":
        # The judge takes the results and kills this process (SIGKILL, the whole group): the process never
        # exits by itself, so no exit hook, finalizer or __del__ of the candidate's runs after the files
        # were written.
        while True:
            time.sleep(60)
    return 0


if __name__ == "__main__":
    sys.exit(main(isolated=True))
