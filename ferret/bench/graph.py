"""Serving-true timing in a timing process: one implementation's call captured in a CUDA graph and replayed, as
serving engines (vLLM, SGLang) run decode, and called plainly from Python, host work included.

The gate's clock (`ferret.bench.process.Clock`) measures the GPU's work with every launch queued ahead: it hides
the host time a plain call costs, and it cannot tell whether the call works inside a CUDA graph at all. Here:
- the call is captured once (after warm-up calls on a side stream, as `torch.cuda.graphs` asks); a capture that
  raises is `not_graph_capturable`, with the exception and the source line it came from (`capture_failure`);
- the graph is replayed on input sets copied into the captured buffers, the judge's fresh draws first (their
  integer inputs differ too), then pool sets; each replay's answers go to the judge (`wire.graph_key`), which
  checks them against its reference like any timed answer: a host-side branch frozen at capture answers another
  set wrongly (docs/cheats.md 32);
- replay time: the median of replays, each behind the copy of its set and an L2 flush, both outside the events;
- eager time: the synchronized wall time per call of plain calls back to back (`eager_wall_ms`).
Nothing here decides: the judge compares (`ferret.gate.timing`).
"""

from __future__ import annotations

import re
import statistics
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ferret import wire

WARM_CALLS = 2  # eager calls on the capture's side stream before it: lazy initialisation stays out of the graph
REPLAY_POOL_SETS = 2  # pool sets replayed for answers, besides every fresh set
REPLAY_MEASURE_MS = 20.0  # replays timed per implementation and case: about this long, 10 to MAX_REPLAYS
MAX_REPLAYS = 200
SETTLE_MS = 0.02  # spun after the flush: the replay's one launch is queued before its start event runs

Call = Callable[[dict, dict], object]  # one call of the implementation on (inputs, outputs), params bound


@dataclass
class Captured:
    """A graph captured from one call, and the buffers it reads and writes."""

    graph: torch.cuda.CUDAGraph
    inputs: dict[str, torch.Tensor]
    outputs: dict[str, torch.Tensor]


def capture(call: Call, inputs: dict[str, torch.Tensor], outputs: dict[str, torch.Tensor]) -> Captured:
    """`call` on copies of `inputs` (fresh addresses, so the graph owns what it reads) captured into a CUDA graph,
    after `WARM_CALLS` eager calls on a side stream. Raises whatever the call raises under capture."""
    static = {name: tensor.clone() for name, tensor in inputs.items()}
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(WARM_CALLS):
            call(static, outputs)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call(static, outputs)
    torch.cuda.synchronize()
    return Captured(graph, static, outputs)


def capture_failure(err: BaseException, own_files: set[str]) -> tuple[str, str | None]:
    """(`<Class>: <message>` of the exception that made the capture fail, the source line it was raised from). A
    failed capture raises twice: the call's own error, then the capture's end, with the first as its context; the
    first is the reason. The line is the innermost frame in `own_files` (the implementation's own code), else the
    innermost frame outside torch."""
    first = err
    while first.__context__ is not None and first.__context__ is not first:
        first = first.__context__
    message = " ".join(str(first).split())[:400]
    frames = traceback.extract_tb(first.__traceback__)
    own = [f for f in frames if f.filename in own_files]
    outside = [f for f in frames if "/torch/" not in f.filename and "/ferret/bench/" not in f.filename]
    site = (own or outside or frames[-1:] or [None])[-1]
    where = f"{site.filename.rsplit('/', 1)[-1]}:{site.lineno}: {(site.line or '').strip()}"[:300] if site else None
    return f"{type(first).__name__}: {message}", where


# What a capture's failure says about the call, as patterns of the line it came from (the first two) or of the
# exception (the rest). Order matters: the first that matches names it.
CAPTURE_CAUSES: tuple[tuple[str, str], ...] = (
    ("host_read", r"\.(item|tolist|numpy)\(|\b(int|float|bool)\(|\b(nonzero|masked_select|unique)\("),
    ("cpu_gpu_copy", r"\.cpu\(|\.to\(\s*['\"]cpu|pin_memory|non_blocking"),
    ("host_sync", r"synchronize|operation not permitted when stream is capturing|cudaErrorStreamCaptureUnsupported"),
    ("capture_invalidated", r"cudaErrorStreamCaptureInvalidated|[Cc]apture"),
)


def capture_cause(reason: str, site: str | None) -> str:
    """A name for why a capture failed: `host_read` (the call read a device value on the host: `.item()`, `.tolist()`,
    `int(t)`, a data-dependent shape), `cpu_gpu_copy`, `host_sync` (a synchronization), `capture_invalidated` (the
    capture broke otherwise), else `exception` (the call raised for a reason of its own). The line decides first:
    a host read and a copy both raise "operation not permitted when stream is capturing"."""
    line = site.split(": ", 1)[-1] if site else ""
    capture_error = any(re.search(pattern, reason) for _, pattern in CAPTURE_CAUSES[2:])
    for cause, pattern in CAPTURE_CAUSES[:2]:
        if capture_error and re.search(pattern, line):
            return cause
    for cause, pattern in CAPTURE_CAUSES[2:]:
        if re.search(pattern, reason):
            return cause
    return "exception"


def replay_into(captured: Captured, inputs: dict[str, torch.Tensor]) -> None:
    """`inputs` copied into the captured buffers (in-place inputs too: each replay starts from the set's state), the
    outputs pre-filled with NaN (a graph that leaves one unwritten shows it), then one replay, queued."""
    for name, tensor in inputs.items():
        captured.inputs[name].copy_(tensor)
    for tensor in captured.outputs.values():
        if tensor.is_floating_point():
            tensor.fill_(float("nan"))
    captured.graph.replay()


def replay_answers(captured: Captured, plan: list[tuple[str, int, dict[str, torch.Tensor]]]) -> dict[str, torch.Tensor]:
    """Each replay's outputs, copied to the host, under `wire.graph_key(source, index, output)`."""
    answers = {}
    for source, index, inputs in plan:
        replay_into(captured, inputs)
        torch.cuda.synchronize()
        answers.update({wire.graph_key(source, index, n): t.detach().contiguous().cpu() for n, t in captured.outputs.items()})
    return answers


def replay_plan(pool: list[dict], fresh: list[dict]) -> list[tuple[str, int, dict[str, torch.Tensor]]]:
    """The sets replayed for answers: every fresh draw first (not the content captured), then pool sets from the
    second on, the first last: at least two sets that differ from the captured one and from each other."""
    pool_order = [*range(1, min(REPLAY_POOL_SETS, len(pool))), 0]
    return [(wire.FRESH_SET, k, s) for k, s in enumerate(fresh)] + [(wire.POOL_SET, i, pool[i]) for i in pool_order]


def replay_ms(captured: Captured, sets: list[dict], flush: Callable[[], object], spin: Callable[[float], None]) -> float:
    """Median time of one replay over ~`REPLAY_MEASURE_MS`: each behind the copy of its set (in turn) and an L2
    flush, both outside the events."""
    replay_into(captured, sets[0])
    torch.cuda.synchronize()
    started = time.perf_counter()
    captured.graph.replay()
    torch.cuda.synchronize()
    estimate_ms = (time.perf_counter() - started) * 1e3
    calls = max(10, min(MAX_REPLAYS, int(REPLAY_MEASURE_MS / max(estimate_ms, 1e-3))))
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(calls)]
    for k, (start, end) in enumerate(events):
        for name, tensor in sets[k % len(sets)].items():
            captured.inputs[name].copy_(tensor)
        flush()
        spin(SETTLE_MS)
        start.record()
        captured.graph.replay()
        end.record()
    torch.cuda.synchronize()
    return statistics.median(start.elapsed_time(end) for start, end in events)


def eager_wall_ms(call: Callable[[], object], sync: Callable[[], None], estimate_ms: float) -> float:
    """Per-call wall time of plain calls back to back over ~20 ms, synchronized before the clock stops: what a caller
    without a graph waits, host work included."""
    calls = max(10, min(200, int(20.0 / max(estimate_ms, 1e-3))))
    sync()
    started = time.perf_counter()
    for _ in range(calls):
        call()
    sync()
    return (time.perf_counter() - started) * 1e3 / calls


def harness_snapshot() -> dict[str, tuple[object, str, object]]:
    """(owner, name, object) of what the serving step relies on, taken before the candidate is loaded: this module's
    functions and torch's CUDA-graph entry points. The candidate shares the timing process, so a replay time or an
    answer could otherwise come from a function it put in their place (`harness_changed`)."""
    import sys

    module = sys.modules[__name__]
    owners: dict[str, tuple[object, list[str]]] = {
        "ferret.bench.graph": (module, [n for n, v in vars(module).items() if callable(v) and not n.startswith("__")]),
        "torch.cuda": (torch.cuda, ["graph", "CUDAGraph", "Stream", "stream", "current_stream", "synchronize"]),
        "torch.cuda.CUDAGraph": (torch.cuda.CUDAGraph, ["replay", "capture_begin", "capture_end"]),
        "statistics": (statistics, ["median"]),
    }
    return {
        f"{label}.{name}": (owner, name, getattr(owner, name))
        for label, (owner, names) in owners.items()
        for name in names
        if hasattr(owner, name)
    }


def harness_changed(snapshot: dict[str, tuple[object, str, object]]) -> list[str]:
    """The entries of `snapshot` no longer in place."""
    return [label for label, (owner, name, obj) in snapshot.items() if getattr(owner, name, None) is not obj]
