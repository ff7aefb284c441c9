"""MLA decode with an FP8 cache against the bf16 step: our two steps and FlashMLA's dense FP8 core, outputs checked first.

Per shape (128 heads, L = 4096, B in 64, 1, 8, 128; every request's cache full), each contract draws its own inputs at
the same dims (`contracts/mla_attention.yaml`, `contracts/mla_attention_fp8.yaml`: the FP8 cache is the contract's
quantization of the same distribution), each step's o_heads is checked against its contract's float64 reference
within its tolerance, and only then the checked implementations are timed with the gate's clock in interleaved
rounds (`benchmarks/mla.py` `timed_rounds`). The shape's summary row holds the FP8 step's speed-up over the bf16 step
(the issue's target: 1.3x at B = 64, where the cache's bytes dominate) and each step's fraction of its own floor.

FlashMLA's dense FP8 core (`sgl-flash-mla`, SM90 only) takes per-tensor scales (q and the cache both e4m3, one
descale each), not the contract's per-block ones: it is quantized its own way from the FP8 step's dequantized cache and
checked against float64 attention over exactly what it was given; a row says why where it is skipped.

    python -m benchmarks mla-fp8 --out OUT --rounds 5
    python -m benchmarks mla-fp8 --cpu --out OUT        # no GPU: a tiny shape under TRITON_INTERPRET=1 (a rehearsal)
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.mla import check, flash_mla_module, floor_us, step_call, timed_rounds

REPO = Path(__file__).resolve().parents[1]
FULL_SHAPES = {f"h128_b{b}_l4096": (b, 128, 4096) for b in (64, 1, 8, 128)}
CPU_SHAPES = {"h16_b2_l64": (2, 16, 64)}
TARGET = ("h128_b64_l4096", 1.3)  # the FP8 step's speed-up over the bf16 step the FP8 contract's work is held to
E4M3_MAX = 448.0


@dataclass(frozen=True)
class Step:
    """One of our steps: its contract and its candidate."""

    label: str
    contract: Path
    candidate: Path


STEPS = (
    Step("bf16 step", REPO / "contracts/mla_attention.yaml", REPO / "tasks/mla_attention/candidates/wgmma_mla.py"),
    Step("fp8 step", REPO / "contracts/mla_attention_fp8.yaml", REPO / "tasks/mla_attention_fp8/candidates/triton_mla_fp8.py"),
)


def full_cache_case(contract, name: str, dims: tuple[int, int, int]):
    """The shape as a case of `contract`: every request's cache full (cache_lens = L - 1), one seed for both steps."""
    from ferret.contract.model import Case

    batch, heads, length = dims
    edits = [{"input": "cache_lens", "set": "value", "value": "L - 1"}]
    return Case.model_validate({"name": name, "dims": {"B": batch, "H": heads, "L": length}, "seed": 7, "edits": edits})


def step_rows(step: Step, shape: str, dims: tuple[int, int, int], device: str, device_name: str) -> tuple[dict, object, dict]:
    """(row, a no-argument call to time or None, the step's reference stages with its cache_lens): the step checked on
    its own contract's inputs for the shape."""
    import torch

    from benchmarks.mla import load_module
    from ferret.contract.task import Task
    from ferret.gate.inputs import draw_inputs

    task = Task.load(step.contract)
    contract = task.contract
    case = full_cache_case(contract, shape, dims)
    inputs = {k: v.to(device) for k, v in draw_inputs(contract, case, "bfloat16").items()}
    params = dict(contract.params)
    with torch.no_grad():
        golden = task.reference({k: v.clone() for k, v in inputs.items()}, params)
    floor, peaks = floor_us(contract, case.dims, inputs, device_name)
    row = {
        "shape": shape,
        "impl": f"{step.label} ({step.candidate.name})",
        "device": device_name,
        "floor_us": floor,
        "floor_peaks": peaks,
    }
    limit = contract.tolerance("bfloat16", "o_heads").rel_l2
    why = check(load_module(step.candidate).run, inputs, params, golden["o_heads"], limit)
    row.update(ok=why is None, why=why)
    call = step_call(load_module(step.candidate).run, inputs, params) if why is None else None
    return row, call, {**golden, "cache_lens": inputs["cache_lens"]}


def per_tensor_e4m3(values):
    """FlashMLA's dense FP8 quantization: one scale for the whole tensor (amax / 448), codes rounded to e4m3."""
    import torch

    scale = (values.abs().amax().float() / E4M3_MAX).clamp_min(torch.finfo(torch.float32).tiny).reshape(1)
    return (values.float() / scale).to(torch.float8_e4m3fn), scale


def attention_f64(q, cache, lengths, scale: float, rank: int):
    """o_latent in float64: each request's query heads over its first `lengths[b]` cache rows (values: the latent)."""
    import torch

    out = torch.empty(q.shape[0], q.shape[1], rank, dtype=torch.float64, device=q.device)
    for b, length in enumerate(lengths.tolist()):
        keys = cache[b, :length].double()
        weights = torch.softmax((q[b].double() @ keys.T) * scale, dim=-1)
        out[b] = weights @ keys[:, :rank]
    return out


def flash_fp8_row(golden: dict, shape: str, params: dict, limit: float, cpu: bool) -> tuple[dict, object]:
    """FlashMLA's dense FP8 core on the FP8 step's dequantized cache, quantized per tensor its own way and checked
    against float64 attention over what it was given; (row, call), the call None with a reason where not timed."""
    row = {"shape": shape, "impl": "FlashMLA dense FP8 core (attention only)"}
    module = flash_mla_module()
    if module is None or cpu:
        return {**row, "skipped": "GPU only" if module is not None else "flash_mla / sgl_flash_mla not importable"}, None
    if not hasattr(module, "get_mla_decoding_metadata"):
        return {**row, "skipped": "this FlashMLA build has no dense FP8 decode (get_mla_decoding_metadata)"}, None
    try:
        call, error = _flash_fp8_call(module, golden, params)
    except Exception as err:  # noqa: BLE001 - the peer's API differs between releases: report, never fail
        first_line = str(err).splitlines()[0][:200] if str(err) else ""
        return {**row, "skipped": f"FlashMLA FP8 call failed: {type(err).__name__}: {first_line}"}, None
    if error > limit:
        return {**row, "skipped": f"FlashMLA FP8 o_latent rel_l2 {error:.3e} > {limit:.3e}"}, None
    return {**row, "flash_mla_rel_l2": error}, call


def _flash_fp8_call(module, golden: dict, params: dict):
    """The no-argument call of the dense FP8 core and its o_latent's rel_l2 against float64 attention."""
    import torch

    from benchmarks.mla import rel_l2
    from tasks.mla_attention import reference as ref
    from tasks.mla_attention_fp8.quant import dequantize

    rank, page = params["kv_lora_rank"], 64
    cache = torch.cat([dequantize(golden["kv_latent"], golden["kv_scale"]), golden["kv_rope"].double()], dim=-1)
    batch, length, width = cache.shape
    q, q_descale = per_tensor_e4m3(torch.cat([golden["q_absorbed"], golden["q_pe_roped"]], dim=-1))
    codes, k_descale = per_tensor_e4m3(cache)
    pages = codes.reshape(batch * length // page, page, 1, width).contiguous()
    table = torch.arange(batch * length // page, dtype=torch.int32, device=cache.device).view(batch, -1)
    seqlens = (golden["cache_lens"] + 1).to(torch.int32)
    meta, _ = module.get_mla_metadata()
    meta.tile_scheduler_metadata, meta.num_splits = module.get_mla_decoding_metadata(
        seqlens, q.shape[1], 1, is_fp8_kvcache=True, use_legacy=True
    )
    scale = ref.softmax_scale(params)
    q4 = q.unsqueeze(1).contiguous()

    def call():
        return module.flash_mla_with_kvcache(
            q4,
            pages,
            table,
            seqlens,
            rank,
            meta,
            None,
            softmax_scale=scale,
            causal=False,
            is_fp8_kvcache=True,
            use_legacy=True,
            descale_q=q_descale,
            descale_k=k_descale,
        )

    out = call()[0].squeeze(1)
    given_q = q.double() * q_descale.double()
    given_cache = codes.double() * k_descale.double()
    return call, rel_l2(out, attention_f64(given_q, given_cache, seqlens, scale, rank))


def summary_row(shape: str, rows: list[dict]) -> dict:
    """The shape's FP8-over-bf16 speed-up, and whether it meets the target where the target is set."""
    times = {r["impl"].split(" (")[0]: r.get("us") for r in rows}
    bf16, fp8 = times.get("bf16 step"), times.get("fp8 step")
    ratio = bf16 / fp8 if bf16 and fp8 else None
    row = {"shape": shape, "impl": "fp8 step over bf16 step", "speedup": ratio}
    if shape == TARGET[0]:
        row.update(target=TARGET[1], target_met=ratio is not None and ratio >= TARGET[1])
    return row


def run_shape(shape: str, dims: tuple[int, int, int], args, device_name: str, clock) -> list[dict]:
    """Both steps and the peer checked, the checked ones timed in interleaved rounds; every row, summary last."""
    import torch

    from ferret.contract.load import load_contract

    device = "cpu" if args.cpu else "cuda"
    rows, timed = [], []
    goldens = {}
    for step in STEPS:
        row, call, goldens[step.label] = step_rows(step, shape, dims, device, device_name)
        rows.append(row)
        if call is not None:
            timed.append((row, "us", call))
    fp8_contract = load_contract(STEPS[1].contract)
    limit = fp8_contract.tolerance("bfloat16", "o_latent").rel_l2
    peer, call = flash_fp8_row(goldens["fp8 step"], shape, dict(fp8_contract.params), limit, args.cpu)
    rows.append({**peer, "device": device_name})
    if call is not None:
        timed.append((rows[-1], "us", call))
    timed_rounds(timed, args.rounds, clock)
    for row in rows:
        if row.get("us") and row.get("floor_us"):
            row["fraction_of_floor"] = row["floor_us"] / row["us"]
    if not args.cpu:
        torch.cuda.empty_cache()
    return [*rows, summary_row(shape, rows)]


def markdown(rows: list[dict]) -> str:
    lines = [
        "| shape | implementation | us | floor us | of floor | speed-up | checked |",
        "| --- | --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in rows:
        us = f"{r['us']:.1f}" if r.get("us") else ""
        floor = f"{r['floor_us']:.1f}" if r.get("floor_us") else ""
        frac = f"{100 * r['fraction_of_floor']:.1f}%" if r.get("fraction_of_floor") else ""
        speedup = f"{r['speedup']:.2f}x" if r.get("speedup") else ""
        if "target" in r:
            speedup += f" (target {r['target']}x: {'met' if r['target_met'] else 'not met'})"
        said = r.get("why") or r.get("skipped") or ("ok" if r.get("ok") or r.get("flash_mla_rel_l2") is not None else "")
        lines.append(f"| {r['shape']} | {r['impl']} | {us} | {floor} | {frac} | {speedup} | {said} |")
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks mla-fp8", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for mla-fp8-bench.jsonl and mla-fp8-bench.md")
    parser.add_argument("--cpu", action="store_true", help="no GPU: a tiny shape under TRITON_INTERPRET=1 (a rehearsal)")
    parser.add_argument("--shapes", nargs="*", help="shape names (default: every one of the profile)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds (the median is kept)")
    args = parser.parse_args(argv)
    known = CPU_SHAPES if args.cpu else FULL_SHAPES
    unknown = [s for s in args.shapes or [] if s not in known]
    if unknown:
        parser.error(f"--shapes: unknown {unknown}; known: {sorted(known)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.cpu:
        os.environ.setdefault("TRITON_INTERPRET", "1")
    args.out.mkdir(parents=True, exist_ok=True)
    shapes = CPU_SHAPES if args.cpu else FULL_SHAPES
    device_name, clock = "cpu (interpreter)", None
    if not args.cpu:
        import torch

        from ferret.bench import guards
        from ferret.bench.process import Clock

        device_name = torch.cuda.get_device_name(0)
        clock = Clock(on_gpu=True, l2_bytes=guards.l2_bytes_of("cuda"))
        clock.calibrate()
    rows: list[dict] = []
    jsonl = args.out / "mla-fp8-bench.jsonl"
    for shape in args.shapes or list(shapes):
        started = time.monotonic()
        for row in run_shape(shape, shapes[shape], args, device_name, clock):
            rows.append(row)
            with jsonl.open("a") as out:
                out.write(json.dumps(row, default=str) + "\n")
        print(f"{shape}: {time.monotonic() - started:.0f} s", flush=True)
    (args.out / "mla-fp8-bench.md").write_text(markdown(rows))
    print(markdown(rows), flush=True)
    return 0
