"""MLA decode: template points and candidates beside torch.compile, FlashMLA and the floor, outputs checked first.

    python -m benchmarks mla --out DIR [--budget-s 240]
        [--point head_block=64,num_warps=8 ...] [--shapes h128_b64_l4096 tp8_b32_l8192 ...] [--no-peers]
        [--candidate FILE ...]
        [--cpu | --static-sm90 HEADS]

Renders template points (tasks/mla_attention/templates; the default point and a dozen new-structure points
unless --point is given; a --point names only what differs from the space's default; --candidate adds a
candidate file, such as a point rendered by an earlier commit) and, per shape (128
heads, L=4096, B in {1, 8, 64, 128}, every request at full length, cache_lens = L - 1; then the contract's
speed cases, drawn as the gate draws them):
  1. checks each point's o_heads against the project's reference (float64, tasks/mla_attention/reference.py)
     within the contract's o_heads tolerance; a wrong point, or one that fails to compile or launch, is
     skipped with the reason printed;
  2. times the whole step (append, absorb, attention, merge + un-absorb) with the gate's own clock (L2 flushed and
     the GPU held by a spin kernel before every call, so its launches are queued before it starts; late calls
     dropped; median), beside torch.compile of the baseline (the gate's comparison)
     and, when the `flash_mla` / `sgl_flash_mla` package imports, FlashMLA's dense decode of the attention
     core alone (absorbed queries to o_latent, paged view of the same cache, output checked first);
  3. reports the roofline floor of the contract (ferret/contract/roofline.py) and the fraction reached, and
     the compiled attention kernel's registers, spills, shared memory and whether its PTX has `wgmma`.
Writes DIR/mla-template-bench.jsonl (one row per measurement, as it comes) and DIR/mla-template-bench.md
(rewritten after every shape). No new (shape, point) is started past --budget-s; one already started
finishes (a compile can take ~30 s), so give the device call --budget-s plus a minute or two.
--static-sm90 HEADS: no GPU needed; each point's attention kernel compiled for sm_90 by this machine's Triton
(with a launch's divisibility hints) and ptxas -v: wgmma, cp.async pipelining, shared memory, registers, spills
(DIR/mla-template-sm90-static.md). A way to prune points before spending device time.
--cpu: a rehearsal under TRITON_INTERPRET=1 on tiny shapes (two points, torch.compile with the `eager`
backend, wall-clock times that are not speeds), so that every path except the GPU's own runs once.
A benchmark, not a gate: the gate's own timing decides.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TEMPLATES = REPO / "tasks" / "mla_attention" / "templates"
CONTRACT = REPO / "contracts" / "mla_attention.yaml"

# Promising points (only what differs from space.yaml's default). Head blocks of 64 with 8 warps put QK^T and
# P@V on Hopper's wgmma with 128 fp32 accumulator registers per thread; the split policy `waves` sizes the
# split count to whole waves over the SMs (programs_per_sm=1: one 64-head program per SM fits in shared memory).
# Compiled for sm_90 on a machine without a GPU (Triton 3.9's compiler, CUDA 13.0 ptxas; the GPU's Triton 3.6
# may differ), the 64-head points with 16-token tiles had no spills (247-255 registers; 108-128 KiB shared
# memory), 32-token tiles spilled 16-72 bytes, 64-token tiles ~200 bytes (and 288 KiB of shared memory with 3
# stages: out of resources); so the list starts with 16-token tiles.
WIDE = {"head_block": 64, "num_warps": 8, "programs_per_sm": 1, "split_policy": "waves"}
NARROW = {**WIDE, "token_block": 16, "value_split": 2, "num_stages": 3}
# Measured on the H200 (whole step, this bench): WIDE with 64-token tiles was the fastest at large batch (h128 B=64
# 364 us vs the default's 628; tp1_b64 334 vs 499; tp8_b32 171 vs 184) and slow at B=8 (350 vs 163), where NARROW with
# head_pad=64 was the best (153). The points first in the list add the new axes to them: side_kernels=streamed (kernels
# 2 and 4 restructured: the default's merge + un-absorption took 31-86 us, its q_prepare 10-28 us) and
# small_token_block=16 (16-token tiles when a program has fewer than 16 tiles of 64, as at B=8). Measured next
# (H200, 2026-11-30; run archive: benchmarks/results/README.md): neither helped at B=8 (streamed 2.1x slower for the default,
# small tiles 1.8x slower for LARGE). few_tiles=default_point runs kernel 3 as the default sizes it where LARGE's
# programs would walk few tiles (B=8, B=1), LARGE elsewhere: the list now starts with it, then LARGE itself.
LARGE = {**WIDE, "token_block": 64}
# The space's default until 2026-12-01, when the template search on the H200 made LARGE the default
# (2026-12-01; the run archive of benchmarks/results/README.md). Every point of GPU_POINTS from its fourth is written over it.
PREVIOUS_DEFAULT = {
    "head_block": 16,
    "token_block": 32,
    "num_warps": 4,
    "num_stages": 2,
    "min_tokens_per_split": 256,
    "programs_per_sm": 2,
    "split_policy": "programs",
}
# The structural axes before the template search of 2026-12-02 (H200; the run archive of benchmarks/results/README.md)
# made balanced runs, the streamed merge and TMA descriptors the default: every point but the first is written over
# them, so each is the kernel it was when measured.
PER_REQUEST = {"split_chunk": "per_request", "side_kernels": "batch_blocks", "kv_loads": "pointers"}
GPU_POINTS: list[dict] = [
    {},  # the default: LARGE with balanced runs, the streamed merge and TMA descriptors
    {**PER_REQUEST, **LARGE},  # the default from 2026-12-01 to 2026-12-02
    {**PER_REQUEST, **LARGE, "few_tiles": "default_point"},  # one point for B=1, 8 and 64
    {**PER_REQUEST, **PREVIOUS_DEFAULT},
    *(
        {**PER_REQUEST, **PREVIOUS_DEFAULT, **point}
        for point in (
            {**LARGE, "side_kernels": "streamed", "few_tiles": "default_point"},
            {**LARGE, "side_kernels": "streamed", "small_token_block": 16},
            {**NARROW, "head_pad": 64, "side_kernels": "streamed"},
            {**LARGE, "small_token_block": 16},
            {"side_kernels": "streamed"},  # the previous default's kernel 3 with the new kernels 2 and 4
            {"split_policy": "waves"},  # the previous default's kernel, its split count sized to whole waves
            {**NARROW},
            {**NARROW, "num_stages": 2},
            {**NARROW, "num_stages": 4},
            {**WIDE},
            {**WIDE, "value_split": 2},
            {**WIDE, "value_split": 2, "num_stages": 3},
            {**NARROW, "batch_block": 16},
            {**NARROW, "head_pad": 64},
        )
    ),
]
CPU_POINTS: list[dict] = [{}, {**PER_REQUEST, **PREVIOUS_DEFAULT}, {**PER_REQUEST, **PREVIOUS_DEFAULT, **NARROW, "head_pad": 64}]

# name -> (B, H, L); every request at full length (cache_lens = L - 1).
FULL_SHAPES = {f"h128_b{b}_l4096": (b, 128, 4096) for b in (64, 128, 8, 1)}
CPU_SHAPES = {"h16_b2_l64": (2, 16, 64), "h40_b3_l40": (3, 40, 40)}


# ------------------------------------------------------------------------------------------ points
def parse_point(text: str) -> dict:
    """`head_block=64,num_warps=8` -> {"head_block": 64, "num_warps": 8} (ints where they parse)."""
    point = {}
    for item in filter(None, text.split(",")):
        name, _, value = item.partition("=")
        point[name.strip()] = int(value) if value.strip().lstrip("-").isdigit() else value.strip()
    return point


@functools.cache
def template_optimizer(templates: Path = TEMPLATES):
    """The template's optimizer, built once (it lists every point of the space: a few seconds)."""
    from ferret.roles.offline import TemplateSearchOptimizer

    return TemplateSearchOptimizer(templates)


def render_points(overrides: list[dict], folder: Path, templates: Path = TEMPLATES) -> list[tuple[str, Path]]:
    """(approach name, rendered file) per point; a point outside the space stops the run before any work."""
    optimizer = template_optimizer(templates)
    folder.mkdir(parents=True, exist_ok=True)
    rendered = []
    for index, override in enumerate(overrides):
        unknown = set(override) - set(optimizer.space.parameters)
        if unknown:
            raise SystemExit(f"--point {override}: unknown parameters {sorted(unknown)}")
        point = {**optimizer.space.default, **override}
        for name, value in point.items():
            if value not in optimizer.space.parameters[name]:
                raise SystemExit(f"--point {override}: {name}={value!r} is not one of {optimizer.space.parameters[name]}")
        path = folder / f"point_{index:02d}.py"
        path.write_text(optimizer.render(point))
        rendered.append((optimizer.approach(point), path))
    return rendered


def candidate_points(paths: list[Path]) -> list[tuple[str, Path]]:
    """(name, file) of each --candidate file, named by its file name; a missing file stops the run before any work."""
    missing = [str(path) for path in paths if not path.is_file()]
    if missing:
        raise SystemExit(f"--candidate: no such file: {', '.join(missing)}")
    return [(f"file {path.name}", path.resolve()) for path in paths]


def load_module(path: Path):
    """Triton reads kernel source from a real file, so each point is imported from its rendered file."""
    spec = importlib.util.spec_from_file_location(f"mla_bench_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ------------------------------------------------------------------------------------------ shapes
def shape_list(names: list[str] | None, cpu: bool, contract) -> list[tuple[str, dict]]:
    """(name, {"dims", "inputs": a function drawing the CPU tensors}) in the order timed: full-length shapes,
    then speed cases. Inputs are drawn when their shape's turn comes (the large ones take seconds)."""
    from ferret.gate.inputs import draw_inputs
    from tasks.mla_attention.inputs import make_inputs

    full = CPU_SHAPES if cpu else FULL_SHAPES
    speed = {} if cpu else {c.name: c for c in contract.cases_for("gpu") if c.name in contract.speed.cases}
    chosen = names or [*full, *speed]
    shapes = []
    for name in chosen:
        if name in full:
            batch, heads, length = full[name]

            def inputs(batch=batch, heads=heads, length=length):
                return make_inputs(batch, heads, length, seed=batch + heads, cache_lens=[length - 1] * batch)

            shapes.append((name, {"dims": {"B": batch, "H": heads, "L": length}, "inputs": inputs}))
        elif name in speed:
            case = speed[name]
            shapes.append((name, {"dims": dict(case.dims), "inputs": lambda case=case: draw_inputs(contract, case, "bfloat16")}))
        else:
            raise SystemExit(f"--shapes: unknown shape {name!r}; known: {sorted(full) + sorted(speed)}")
    return shapes


# ------------------------------------------------------------------------------------------ checks
def rel_l2(actual, expected) -> float:
    actual, expected = actual.double(), expected.double()
    return float((actual - expected).norm() / expected.norm().clamp_min(1e-300))


def run_step(fn, inputs: dict, params: dict):
    """One whole step on fresh copies of the inputs (the cache append is in place); returns o_heads."""
    import torch

    copies = {name: t.clone() for name, t in inputs.items()}
    batch, heads, _ = inputs["q_nope"].shape
    outputs = {
        "o_heads": torch.full(
            (batch, heads, params["v_head_dim"]), float("nan"), dtype=torch.bfloat16, device=inputs["q_nope"].device
        )
    }
    fn(copies, outputs, params)
    return outputs["o_heads"]


def check(fn, inputs: dict, params: dict, expected, limit: float) -> str | None:
    """None when fn's o_heads is finite and within the tolerance of the reference, else why not."""
    import torch

    try:
        actual = run_step(fn, inputs, params)
    except Exception as err:  # noqa: BLE001 - a point that fails to compile or launch is reported, not fatal
        return f"{type(err).__name__}: {str(err).splitlines()[0][:300] if str(err) else ''}"
    if not torch.isfinite(actual).all():
        return f"non-finite o_heads ({int((~torch.isfinite(actual)).sum())} elements)"
    error = rel_l2(actual, expected)
    return None if error <= limit else f"o_heads rel_l2 {error:.3e} > tolerance {limit:.3e}"


# ------------------------------------------------------------------------------------------ timing
def time_us(fn, clock, host_ms: float | None) -> float:
    """Microseconds of one round of fn. On a GPU, the gate's own clock (`ferret.bench.process.Clock`): the L2 flushed
    and the GPU held by a spin kernel longer than the step's host launch time before every call, so the events time the
    GPU's work; calls whose launches were not all queued before their start event ran (late) are dropped, and the
    round is the median of the rest. do_bench, used here before, timed the host's Python launches at small batch: the
    committed candidate's step read 394 us at 128 heads, B=1, and torch.compile's 242, where the gate timed 42.4 and
    49.5 (H100: benchmarks/results/2026-12-06-h100-mla-flashmla-peer.md). Under the interpreter
    (clock None) one wall-clock call: a rehearsal, not a speed."""
    if clock is None:
        start = time.perf_counter()
        fn()
        return (time.perf_counter() - start) * 1e6
    return 1e3 * clock.bench(fn, host_ms)


def step_call(fn, inputs: dict, params: dict):
    """A no-argument call of one whole step on a private copy of the inputs (the append writes its cache)."""
    import torch

    batch, heads, _ = inputs["q_nope"].shape
    outputs = {"o_heads": torch.empty((batch, heads, params["v_head_dim"]), dtype=torch.bfloat16, device=inputs["q_nope"].device)}
    work = {name: t.clone() for name, t in inputs.items()}
    return lambda: fn(work, outputs, params)


def timed_rounds(timed: list[tuple[dict, str, object]], rounds: int, clock) -> None:
    """Each implementation timed `rounds` times, interleaved (a, b, c, a, b, c, ...), so a slow spell of the
    machine falls on every implementation alike; the row's figure is the median of its rounds, and `spread`
    is (max - min) / median of them. On a GPU (`clock` the gate's Clock) each implementation's host launch time is
    measured first (it sizes the spin; None where a call waits for the GPU, which no spin can run ahead of), and the
    row keeps it and each round's fraction of late calls dropped."""
    host_ms = [clock.host_ms(call) if clock is not None else None for _row, _key, call in timed]
    for (row, _key, _call), host in zip(timed, host_ms, strict=True):
        if clock is not None:
            row["host_launch_us"] = None if host is None else round(1e3 * host, 2)
    for _ in range(rounds):
        for (row, _key, call), host in zip(timed, host_ms, strict=True):
            row.setdefault("rounds_us", []).append(round(time_us(call, clock, host), 2))
            if clock is not None:
                row.setdefault("late_fractions", []).append(round(clock.late_fractions[-1], 3))
    for row, key, _call in timed:
        values = sorted(row["rounds_us"])
        row[key] = statistics.median(values)
        row["spread"] = round((values[-1] - values[0]) / row[key], 4)


# ------------------------------------------------------------------------------------------ compiled code
def compiled_kernels(jit_fn) -> list:
    """The compiled kernels of a @triton.jit function (Triton 3.x keeps them per device; layouts differ by
    version, so every dict of compiled kernels found in its caches is taken)."""
    found = []
    caches = getattr(jit_fn, "device_caches", None) or {}
    for entry in caches.values():
        parts = entry if isinstance(entry, tuple) else (entry,)
        for part in parts:
            if isinstance(part, dict):
                found += [k for k in part.values() if hasattr(k, "asm")]
    legacy = getattr(jit_fn, "cache", None)
    if isinstance(legacy, dict):
        for per_device in legacy.values():
            if isinstance(per_device, dict):
                found += [k for k in per_device.values() if hasattr(k, "asm")]
    return list({id(k): k for k in found}.values())


def kernel_facts(module) -> dict:
    """Registers, spills, shared memory and wgmma of each compiled variant of the attention kernel."""
    try:
        kernels = compiled_kernels(getattr(module, "_split_kv_attention_kernel", None))
    except Exception as err:  # noqa: BLE001 - facts are best effort, never a reason to stop
        return {"compiled_variants": None, "facts_error": f"{type(err).__name__}: {err}"}
    if not kernels:
        return {"compiled_variants": 0}
    facts = []
    for kernel in kernels:
        ptx = ""
        try:
            ptx = kernel.asm.get("ptx", "") if hasattr(kernel.asm, "get") else kernel.asm["ptx"]
        except Exception:  # noqa: BLE001, S110 - facts are best effort
            pass
        metadata = getattr(kernel, "metadata", None)
        facts.append(
            {
                "wgmma": "wgmma" in ptx,
                "mma_sync": "mma.sync" in ptx,
                "n_regs": getattr(kernel, "n_regs", None),
                "n_spills": getattr(kernel, "n_spills", None),
                "shared_bytes": getattr(metadata, "shared", None),
                "num_warps": getattr(metadata, "num_warps", None),
            }
        )
    return {"compiled_variants": len(facts), "wgmma": any(f["wgmma"] for f in facts), "variants": facts}


# ------------------------------------------------------------------------------------------ FlashMLA
def flash_mla_module():
    for name in ("flash_mla", "sgl_flash_mla"):
        try:
            module = importlib.import_module(name)
        except Exception:  # noqa: BLE001, S112 - optional dependency
            continue
        if hasattr(module, "flash_mla_with_kvcache") and hasattr(module, "get_mla_metadata"):
            return module
    return None


def paged_view(golden: dict, inputs: dict, page: int = 64):
    """FlashMLA's inputs from the same step: absorbed queries [B, 1, H, 576] and the appended cache as pages of
    `page` rows in order (block_table[b] = b's pages), cache_seqlens = cache_lens + 1."""
    import torch

    cache = golden["kv_cache"].to(torch.bfloat16)
    batch, length, width = cache.shape
    if length % page:
        return None
    q = torch.cat([golden["q_absorbed"], golden["q_pe_roped"]], dim=-1).to(torch.bfloat16).unsqueeze(1)
    pages = cache.reshape(batch * length // page, page, 1, width).contiguous()
    table = torch.arange(batch * length // page, dtype=torch.int32, device=cache.device).view(batch, -1)
    seqlens = (inputs["cache_lens"] + 1).to(torch.int32)
    return q.contiguous(), pages, table, seqlens


def flash_mla_call(module, q, pages, table, seqlens, params):
    """A no-argument call of FlashMLA's dense bf16 decode. Two interfaces: the `sgl-flash-mla` wheel's (the
    scheduler metadata filled by the first call, dense decoding behind use_legacy=True) and FlashMLA's
    original one (get_mla_metadata(seqlens, heads, 1) returns the metadata and the split counts)."""
    import inspect

    from tasks.mla_attention import reference as ref

    scale = ref.softmax_scale(params)
    rank = params["kv_lora_rank"]
    if "use_legacy" in inspect.signature(module.flash_mla_with_kvcache).parameters:
        metadata, _ = module.get_mla_metadata()
        return lambda: module.flash_mla_with_kvcache(
            q, pages, table, seqlens, rank, metadata, None, softmax_scale=scale, causal=False, use_legacy=True
        )
    metadata, splits = module.get_mla_metadata(seqlens, q.shape[1] * q.shape[2], 1)
    return lambda: module.flash_mla_with_kvcache(
        q, pages, table, seqlens, rank, metadata, splits, softmax_scale=scale, causal=False
    )


def flash_mla_row(golden: dict, inputs: dict, params: dict, limit: float, cpu: bool) -> tuple[dict, object]:
    """FlashMLA's attention core on the same step, its o_latent checked first, and its no-argument call (None
    with a reason when it is not to be timed)."""
    view = paged_view(golden, inputs)  # built first so that the CPU rehearsal runs it too
    module = flash_mla_module()
    if module is None:
        return {"skipped": "flash_mla / sgl_flash_mla not importable"}, None
    if view is None or cpu:
        return {"skipped": "cache length not a multiple of 64" if view is None else "GPU only"}, None
    q, pages, table, seqlens = view
    try:
        call = flash_mla_call(module, q, pages, table, seqlens, params)
        out = call()[0]
    except Exception as err:  # noqa: BLE001 - the peer's API differs between releases: report, never fail
        first_line = str(err).splitlines()[0][:200] if str(err) else ""
        return {"skipped": f"FlashMLA call failed: {type(err).__name__}: {first_line}"}, None
    error = rel_l2(out.squeeze(1), golden["o_latent"])
    if error > limit:
        return {"skipped": f"FlashMLA o_latent rel_l2 {error:.3e} > {limit:.3e}"}, None
    return {"flash_mla_rel_l2": error}, call


# ------------------------------------------------------------------------------------------ one shape
def floor_us(contract, dims: dict, inputs: dict, device_name: str) -> tuple[float, str]:
    from ferret.bench import guards
    from ferret.contract.roofline import count_roofline

    peaks = guards.peaks_for(device_name)
    label = device_name
    if peaks is None:
        peaks, label = guards.DATASHEET_PEAKS["H200"], "H200 datasheet (not this device)"
    work = count_roofline(contract, dims, {k: v.cpu() for k, v in inputs.items()}, "bfloat16")
    return 1e3 * guards.floor_ms(work.bytes, work.flops, peaks), label


class Bench:
    """The run's state: points, reference implementations, output files and the deadline."""

    def __init__(self, args, contract, points):
        import torch

        from ferret.contract.imports import load_entry

        self.args, self.contract, self.points = args, contract, points
        self.device = "cpu" if args.cpu else "cuda"
        self.device_name = "cpu (interpreter)" if args.cpu else torch.cuda.get_device_name(0)
        self.deadline = time.monotonic() + args.budget_s
        self.params = dict(contract.params)
        baseline = load_entry(contract.baseline.entry, str(REPO))
        torch._dynamo.config.cache_size_limit = 64  # one graph per shape
        self.compiled = None if args.no_peers else torch.compile(baseline, backend="eager" if args.cpu else "inductor")
        self.modules: dict[str, object] = {}
        self.clock = None  # the gate's clock, made on first use by gpu_clock
        self.rows: list[dict] = []
        self.jsonl = args.out / "mla-template-bench.jsonl"

    def out_of_time(self) -> bool:
        return time.monotonic() > self.deadline

    def emit(self, row: dict) -> None:
        self.rows.append(row)
        with self.jsonl.open("a") as out:
            out.write(json.dumps(row, default=str) + "\n")
        shown = {k: v for k, v in row.items() if k not in ("variants",)}
        print(json.dumps(shown, default=str), flush=True)

    def module(self, name: str, path: Path):
        if name not in self.modules:
            self.modules[name] = load_module(path)
        return self.modules[name]

    def shape(self, shape_name: str, spec: dict) -> None:
        """Every implementation checked first, then the checked ones timed in interleaved rounds."""
        import torch

        from tasks.mla_attention import reference as ref

        inputs = {k: v.to(self.device) for k, v in spec["inputs"]().items()}
        golden = ref.reference(inputs, self.params)
        base = {"shape": shape_name, "dims": spec["dims"], "device": self.device_name}
        floor, peaks = floor_us(self.contract, spec["dims"], inputs, self.device_name)
        base.update(floor_us=floor, floor_peaks=peaks)
        limit = self.contract.tolerance("bfloat16", "o_heads").rel_l2
        latent_limit = self.contract.tolerance("bfloat16", "o_latent").rel_l2
        timed: list[tuple[dict, str, object]] = []
        try:
            timed += self.peer_rows(base, inputs, golden, limit, latent_limit)
        except Exception as err:  # noqa: BLE001
            self.emit({**base, "impl": "peers", "ok": False, "why": f"{type(err).__name__}: {err}"[:400]})
        for approach, path in self.points:
            if self.out_of_time():
                print(f"{shape_name} {approach}: not timed (past --budget-s)", flush=True)
                continue
            try:
                timed += self.point_row(base, approach, path, inputs, golden["o_heads"], limit)
            except Exception as err:  # noqa: BLE001 - one point's failure (check, facts) never ends the run
                self.emit({**base, "impl": approach, "ok": False, "why": f"{type(err).__name__}: {err}"[:400]})
        try:
            timed_rounds(timed, self.args.rounds, None if self.args.cpu else self.gpu_clock())
        except Exception as err:  # noqa: BLE001 - e.g. a launch failure while timing: the rows say so
            for row, _key, _call in timed:
                row["why"] = f"timing failed: {type(err).__name__}: {err}"[:400]
        for row, key, call in timed:
            if row.get(key) and key == "us":
                row["fraction_of_floor"] = base["floor_us"] / row["us"]
                if self.args.kernels and not self.args.cpu:
                    try:
                        row["kernels_us"] = self.kernels_of(call)
                    except Exception as err:  # noqa: BLE001 - the profiler failing costs the breakdown, not the row
                        row["kernels_error"] = f"{type(err).__name__}: {err}"[:200]
            self.emit(row)
        del golden, inputs, timed
        if not self.args.cpu:
            torch.cuda.empty_cache()

    def kernels_of(self, call) -> dict[str, float]:
        """Device microseconds per step of each kernel the step launches (the judge's own profiler breakdown,
        L2 flushed before each call), so two points with the same attention kernel can be told apart."""
        from ferret.bench.process import kernel_breakdown

        return {name: round(us, 2) for name, us in kernel_breakdown(call, self.gpu_clock()).items()}

    def gpu_clock(self):
        """The gate's clock, made and calibrated (the GPU's spin rate, one flush's time) on first use, then kept."""
        from ferret.bench import guards
        from ferret.bench.process import Clock

        if self.clock is None:
            self.clock = Clock(on_gpu=True, l2_bytes=guards.l2_bytes_of("cuda"))
            self.clock.calibrate()
        return self.clock

    def peer_rows(self, base: dict, inputs: dict, golden: dict, limit: float, latent_limit: float) -> list:
        """torch.compile of the baseline and FlashMLA's core, checked; those to time."""
        if self.out_of_time() or self.args.no_peers:
            return []
        timed = []
        why = check(self.compiled, inputs, self.params, golden["o_heads"], limit)
        row = {**base, "impl": "torch.compile(baseline)", "ok": why is None, "why": why}
        if why is None:
            timed.append((row, "us", step_call(self.compiled, inputs, self.params)))
        else:
            self.emit(row)
        flash, call = flash_mla_row(golden, inputs, self.params, latent_limit, self.args.cpu)
        flash_row = {**base, "impl": "FlashMLA core (attention only)", **flash}
        if call is None:
            self.emit(flash_row)
        else:
            timed.append((flash_row, "flash_mla_core_us", call))
        return timed

    def point_row(self, base: dict, approach: str, path: Path, inputs: dict, expected, limit: float) -> list:
        """One template point checked (and its compiled facts read); [(row, key, call)] when it is to be timed."""
        row = {**base, "impl": approach, "file": path.name}
        try:
            module = self.module(approach, path)
        except Exception as err:  # noqa: BLE001
            self.emit({**row, "ok": False, "why": f"import failed: {type(err).__name__}: {err}"})
            return []
        started = time.monotonic()
        why = check(module.run, inputs, self.params, expected, limit)
        row.update(ok=why is None, why=why, first_call_s=round(time.monotonic() - started, 2))
        row["config"] = module._attention_config(
            *inputs["q_nope"].shape[:2], inputs["kv_cache"].shape[1], inputs["kv_cache"].device
        )
        row.update(kernel_facts(module))
        if why is not None:
            self.emit(row)
            return []
        return [(row, "us", step_call(module.run, inputs, self.params))]


# ------------------------------------------------------------------------------------------ sm_90 without a GPU
POINTER_TYPES = {
    "q_ptr": "*bf16",
    "cache_ptr": "*bf16",
    "cache_lens_ptr": "*i32",
    "partial_ptr": "*fp32",
    "lse_ptr": "*fp32",
    "block_table_ptr": "*i32",
}
PAGE_ROWS = 64  # the paged contract's rows per page (contracts/mla_attention_paged.yaml)


def sm90_source(module, config: dict):
    """The attention kernel as Triton would specialize it on a GPU launch: pointers and strides divisible by 16
    (without that hint nothing is pipelined), the point's block sizes as constexprs."""
    from triton.compiler import ASTSource

    kernel = getattr(module, "_split_kv_attention_kernel", None) or module._paged_attention_kernel  # either layout
    constants = {"RANK": 512, "ROPE": 64, "BLOCK_H": config["BLOCK_H"], "BLOCK_N": config["BLOCK_N"], "INTERPRETED": False}
    if "PAGE_SIZE" in kernel.arg_names:
        constants["PAGE_SIZE"] = PAGE_ROWS
    if "LENS_BLOCK" in kernel.arg_names:  # split_chunk=balanced
        constants.update(LENS_BLOCK=64, SPLITS_POW2=max(2, 1 << (config["num_splits"] - 1).bit_length()))
    signature = {
        name: "constexpr" if name in constants else POINTER_TYPES.get(name, "fp32" if name == "qk_scale_log2" else "i32")
        for name in kernel.arg_names
    }
    divisible = [i for i, name in enumerate(kernel.arg_names) if name.endswith("_ptr") or name.startswith("stride")]
    return ASTSource(
        fn=kernel, signature=signature, constexprs=constants, attrs={(i,): [["tt.divisibility", 16]] for i in divisible}
    )


# Kernels 2 and 4 of each structure, with the constexprs of their largest blocks (B >= 64 rows; 16 splits).
SIDE_POINTER_TYPES = {
    "q_nope_ptr": "*bf16",
    "q_pe_ptr": "*bf16",
    "w_kv_b_ptr": "*bf16",
    "inv_freq_ptr": "*fp32",
    "positions_ptr": "*i64",
    "q_ptr": "*bf16",
    "partial_ptr": "*fp32",
    "lse_ptr": "*fp32",
    "latent_ptr": "*bf16",
    "out_ptr": "*bf16",
}
SHAPE_CONSTANTS = {"RANK": 512, "NOPE": 128, "ROPE": 64, "V_DIM": 128, "INTERPRETED": False}
SIDE_KERNELS = {
    "_q_prepare_kernel": ({"BLOCK_B": 64}, 4),
    "_combine_unabsorb_kernel": ({"BLOCK_B": 64, "BLOCK_R": 64, "SPLITS_POW2": 16, "PER_HEAD_UV": True}, 3),
    "_merge_splits_kernel": ({"BLOCK_ROWS": 8, "SPLIT_CHUNK": 2, "SPLITS_POW2": 16}, 3),
    "_unabsorb_kernel": ({"BLOCK_B": 64, "BLOCK_V": 128, "BLOCK_R": 64, "PER_HEAD_UV": True}, 3),
}


def side_kernel_facts(module) -> dict:
    """Registers and spills of kernels 2 and 4 (whichever the point renders) compiled for sm_90 here."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    facts = {}
    for name, (blocks, stages) in SIDE_KERNELS.items():
        kernel = getattr(module, name, None)
        if kernel is None:
            continue
        # kernel 2's column block (run() launches it with 256 columns in both forms)
        constants = {**blocks, "BLOCK_C": 256, **SHAPE_CONSTANTS}
        constants = {k: v for k, v in constants.items() if k in kernel.arg_names}
        signature = {
            arg: "constexpr" if arg in constants else SIDE_POINTER_TYPES.get(arg, "fp32" if arg == "rope_magnitude" else "i32")
            for arg in kernel.arg_names
        }
        divisible = [i for i, arg in enumerate(kernel.arg_names) if arg.endswith("_ptr") or arg.startswith("stride")]
        source = ASTSource(
            fn=kernel, signature=signature, constexprs=constants, attrs={(i,): [["tt.divisibility", 16]] for i in divisible}
        )
        try:
            warps = 8 if name == "_q_prepare_kernel" else 4  # as run() launches them
            compiled = triton.compile(
                source, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps, "num_stages": stages}
            )
        except Exception as err:  # noqa: BLE001 - reported in the row
            facts[name] = {"why": f"{type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}"}
            continue
        facts[name] = {"shared_kib": compiled.metadata.shared / 1024, **ptxas_facts(compiled.asm["ptx"])}
    return facts


def ptxas_facts(ptx: str) -> dict:
    """Registers and spill bytes from `ptxas -v` (TRITON_PTXAS_PATH or ptxas on the PATH); a PTX version newer
    than that ptxas knows is lowered to the one it names."""
    import re
    import shutil
    import subprocess
    import tempfile

    ptxas = os.environ.get("TRITON_PTXAS_PATH") or shutil.which("ptxas")
    if not ptxas:
        return {"ptxas": "not found"}
    arch = re.search(r"^\.target (sm_\w+)", ptx, re.M).group(1)
    with tempfile.TemporaryDirectory() as folder:
        for _ in range(2):
            Path(folder, "k.ptx").write_text(ptx)
            done = subprocess.run(
                [ptxas, f"-arch={arch}", "-v", f"{folder}/k.ptx", "-o", f"{folder}/k.cubin"],
                capture_output=True,
                text=True,
                check=False,
            )
            newest = re.search(r"current version is '([\d.]+)'", done.stderr)
            if not newest:
                break
            ptx = re.sub(r"^\.version [\d.]+", f".version {newest.group(1)}", ptx, flags=re.M)
    registers = re.search(r"Used (\d+) registers", done.stderr)
    spills = re.search(r"(\d+) bytes spill stores", done.stderr)
    if not registers:
        return {"ptxas": done.stderr.strip().splitlines()[-1][:200] if done.stderr.strip() else "failed"}
    return {"n_regs": int(registers.group(1)), "n_spills": int(spills.group(1)) if spills else None}


def static_sm90_row(approach: str, path: Path, heads: int, small_tiles: bool = False) -> dict:
    """One point's attention kernel compiled for sm_90 here: wgmma or not, shared memory, registers, spills (with
    small_tiles, its SMALL_TOKEN_BLOCK variant); kernels 2 and 4 with the point's main row."""
    import torch
    import triton
    from triton.backends.compiler import GPUTarget

    module = load_module(path)
    config = module._attention_config(8, heads, 4096, torch.device("cpu"))  # block sizes as on a GPU
    if small_tiles:
        config["BLOCK_N"] = module.SMALL_TOKEN_BLOCK
        approach = f"{approach} (its small tiles)"
    row = {"impl": approach, "heads": heads, **{k: config[k] for k in ("BLOCK_H", "BLOCK_N", "num_warps", "num_stages")}}
    try:
        kernel = triton.compile(
            sm90_source(module, config),
            target=GPUTarget("cuda", 90, 32),
            options={"num_warps": config["num_warps"], "num_stages": config["num_stages"]},
        )
    except Exception as err:  # noqa: BLE001 - e.g. out of shared memory, or no ptxas for the last stage
        return {**row, "why": f"{type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}"}
    ptx = kernel.asm["ptx"]
    return {
        **row,
        "wgmma": "wgmma" in ptx,
        "cp_async": ptx.count("cp.async.cg"),
        "tma_loads": ptx.count("cp.async.bulk.tensor"),
        "shared_kib": kernel.metadata.shared / 1024,
        **ptxas_facts(ptx),
        "side": {} if small_tiles else side_kernel_facts(module),
    }


def static_sm90(points: list[tuple[str, Path]], heads: int, out: Path) -> None:
    lines = [
        "| point | BLOCK_H x BLOCK_N | warps | stages | wgmma | cp.async | TMA loads | shared KiB | registers | "
        "spill bytes | kernels 2 and 4: registers/spills | note |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    runs = [
        (approach, path, small) for approach, path in points for small in (False, True) if not small or "small-tiles" in approach
    ]
    for approach, path, small in runs:
        r = static_sm90_row(approach, path, heads, small_tiles=small)
        print(json.dumps(r), flush=True)
        side = ", ".join(
            f"{name.strip('_')} {f.get('n_regs', '-')}/{f.get('n_spills', '-')} {f.get('why', '')}".strip()
            for name, f in r.get("side", {}).items()
        )
        lines.append(
            f"| {r['impl']} | {r['BLOCK_H']} x {r['BLOCK_N']} | {r['num_warps']} | {r['num_stages']} | "
            f"{r.get('wgmma', '-')} | {r.get('cp_async', '-')} | {r.get('tma_loads', '-')} | "
            f"{r.get('shared_kib', 0):.0f} | {r.get('n_regs', '-')} | {r.get('n_spills', '-')} | {side or '-'} | "
            f"{r.get('why') or r.get('ptxas') or ''} |"
        )
    (out / "mla-template-sm90-static.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines), flush=True)


# ------------------------------------------------------------------------------------------ report
def markdown(rows: list[dict]) -> str:
    lines = [
        "| shape | implementation | us (median) | spread | x torch.compile | fraction of floor | floor us | wgmma | "
        "regs / spills | splits | note |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    compiled = {r["shape"]: r.get("us") for r in rows if r["impl"] == "torch.compile(baseline)"}
    for r in rows:
        us = r.get("us") or r.get("flash_mla_core_us")
        ratio = compiled.get(r["shape"]) / us if us and compiled.get(r["shape"]) else None
        fraction = r["floor_us"] / us if us else None
        variants = r.get("variants") or []
        regs = ", ".join(f"{v['n_regs']}/{v['n_spills']}" for v in variants) or "-"
        wgmma = "-" if "wgmma" not in r else ("yes" if r["wgmma"] else "no")
        spread = f"{r['spread']:.1%}" if "spread" in r else "-"
        lines.append(
            f"| {r['shape']} | {r['impl']} | {f'{us:.1f}' if us else '-'} | "
            f"{spread} | "
            f"{f'{ratio:.2f}' if ratio else '-'} | "
            f"{f'{fraction:.2f}' if fraction else '-'} | {r['floor_us']:.1f} | {wgmma} | {regs} | "
            f"{(r.get('config') or {}).get('num_splits', '-')} | {r.get('why') or r.get('skipped') or ''} |"
        )
    return "\n".join(lines) + "\n"


def kernel_lines(rows: list[dict]) -> str:
    """Per shape and point, the device microseconds of each kernel of one step (with --kernels)."""
    out = []
    for r in (r for r in rows if r.get("kernels_us")):
        parts = ", ".join(f"{name.split('(')[0][:48]} {us:.1f}" for name, us in r["kernels_us"].items())
        out.append(f"- {r['shape']} | {r['impl']}: {parts}")
    return ("\nDevice time per kernel (us per step):\n" + "\n".join(out) + "\n") if out else ""


def report(rows: list[dict]) -> str:
    return markdown(rows) + "\n" + best_lines(rows) + kernel_lines(rows)


def best_lines(rows: list[dict]) -> str:
    """Per shape, the fastest checked point."""
    out = []
    for shape in dict.fromkeys(r["shape"] for r in rows):
        timed = [r for r in rows if r["shape"] == shape and r.get("us") and r["impl"] != "torch.compile(baseline)"]
        if timed:
            best = min(timed, key=lambda r: r["us"])
            out.append(f"- {shape}: best {best['impl']} at {best['us']:.1f} us")
    return "\n".join(out) + "\n"


# ------------------------------------------------------------------------------------------ main
def parse_args(argv: list[str] | None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks mla", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the JSONL, the table and the rendered points")
    parser.add_argument("--budget-s", type=float, default=240.0, help="no new (shape, point) is started after this")
    parser.add_argument(
        "--point",
        action="append",
        default=None,
        type=parse_point,
        help="a template point as name=value,... over the default (repeatable); the built-in list "
        "otherwise; `--point ''` is the default point",
    )
    parser.add_argument("--shapes", nargs="+", default=None, help="shape names (default: all of the mode's)")
    parser.add_argument("--cpu", action="store_true", help="rehearsal under TRITON_INTERPRET=1 on tiny shapes")
    parser.add_argument(
        "--templates",
        type=Path,
        default=TEMPLATES,
        help="with --static-sm90: the template space to render (tasks/mla_attention_paged/templates "
        "for the paged cache's attention kernel)",
    )
    parser.add_argument(
        "--static-sm90",
        type=int,
        metavar="HEADS",
        default=None,
        help="no GPU needed: compile each point's attention kernel for sm_90 at HEADS heads and table "
        "wgmma, shared memory, registers and spills (ptxas -v); nothing is run or timed",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="timings of each implementation per shape, interleaved; the table shows their median",
    )
    parser.add_argument(
        "--kernels",
        action="store_true",
        help="also each point's device time per kernel (torch.profiler, L2 flushed), in the JSONL and the table's last section",
    )
    parser.add_argument(
        "--candidate",
        action="append",
        default=[],
        type=Path,
        metavar="FILE",
        help="also time this candidate file (a rendered point from another commit, say) beside the "
        "points, named by its file name",
    )
    parser.add_argument(
        "--no-peers",
        action="store_true",
        help="time the template points only (no torch.compile, no FlashMLA): a second call's shortcut",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.out, args.templates = args.out.resolve(), args.templates.resolve()
    if args.cpu:
        os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported
    sys.path.insert(0, str(REPO))
    import torch

    from ferret.contract.load import load_contract

    if not args.cpu and not args.static_sm90 and not torch.cuda.is_available():
        raise SystemExit("no CUDA device: pass --cpu for the interpreter rehearsal")
    args.out.mkdir(parents=True, exist_ok=True)
    if args.static_sm90:
        static_sm90(
            render_points(args.point if args.point is not None else GPU_POINTS, args.out / "points", args.templates),
            args.static_sm90,
            args.out,
        )
        return 0
    if args.templates != TEMPLATES:
        raise SystemExit("--templates: only with --static-sm90 (the timed bench draws the contiguous contract's inputs)")
    contract = load_contract(CONTRACT)
    points = render_points(
        args.point if args.point is not None else (CPU_POINTS if args.cpu else GPU_POINTS), args.out / "points"
    )
    points += candidate_points(args.candidate)
    bench = Bench(args, contract, points)
    print(
        f"device {bench.device_name}; torch {torch.__version__}; {len(points)} points; budget {args.budget_s:.0f} s", flush=True
    )
    for shape_name, spec in shape_list(args.shapes, args.cpu, contract):
        if bench.out_of_time():
            print(f"{shape_name}: not started (past --budget-s)", flush=True)
            continue
        try:
            bench.shape(shape_name, spec)
        except Exception as err:  # noqa: BLE001 - e.g. out of memory in the reference: the next shape still runs
            print(f"{shape_name}: failed: {type(err).__name__}: {err}", flush=True)
        (args.out / "mla-template-bench.md").write_text(report(bench.rows))
    print(report(bench.rows), flush=True)
    print(f"wrote {bench.jsonl} and {args.out / 'mla-template-bench.md'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
