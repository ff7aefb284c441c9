"""MLA as DeepSeek is served: an FP8 cache and several query tokens per request, beside our bf16 step and FlashMLA.

`--variant fp8`: per shape (128 heads, L = 4096, B in 64, 1, 8, 128; every request's cache full), each contract draws
its own inputs at the same dims (`contracts/mla_attention.yaml`, `contracts/mla_attention_fp8.yaml`: the FP8 cache is
the contract's quantization of the same distribution); each step's o_heads is checked against its contract's float64
reference within its tolerance, and only then are the checked implementations timed with the gate's clock in
interleaved rounds (`benchmarks/mla.py` `timed_rounds`). The shape's summary row holds the FP8 step's speed-up over the
bf16 step (the target: 1.3x at B = 64, where the cache's bytes dominate). FlashMLA's dense FP8 core (`sgl-flash-mla`,
SM90 only) takes per-tensor scales (q and the cache both e4m3, one descale each), not the contract's per-block ones:
it is quantized its own way from the FP8 step's dequantized cache and checked against float64 attention over exactly
what it was given.

`--variant mtp`: the same shapes with s_q = 2 query tokens per request (`contracts/mla_attention_mtp.yaml`, caches
full after both new rows): our multi-token step, and FlashMLA's dense bf16 core at s_q = 2 (causal) on the step's
appended cache, its o_latent checked against the contract's reference first. The summary row holds FlashMLA's core
time over our whole step's. Every row says why where it is skipped.

    python -m benchmarks mla-served --out OUT --rounds 5                  # both variants
    python -m benchmarks mla-served --variant mtp --out OUT
    python -m benchmarks mla-served --cpu --out OUT        # no GPU: a tiny shape under TRITON_INTERPRET=1 (a rehearsal)
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.mla import flash_mla_module, floor_us, rel_l2, timed_rounds

REPO = Path(__file__).resolve().parents[1]
FULL_SHAPES = {f"h128_b{b}_l4096": (b, 128, 4096) for b in (64, 1, 8, 128)}
CPU_SHAPES = {"h16_b2_l64": (2, 16, 64)}
TARGET = ("h128_b64_l4096", 1.3)  # the FP8 step's speed-up over the bf16 step the FP8 contract's work is held to
E4M3_MAX = 448.0
MTP_TOKENS = 2  # s_q of the multi-token rows: the MTP contract's main cases


@dataclass(frozen=True)
class Step:
    """One of our steps: its contract and its candidate."""

    label: str
    contract: Path
    candidate: Path


BF16 = Step("bf16 step", REPO / "contracts/mla_attention.yaml", REPO / "tasks/mla_attention/candidates/wgmma_mla.py")
FP8 = Step("fp8 step", REPO / "contracts/mla_attention_fp8.yaml", REPO / "tasks/mla_attention_fp8/candidates/triton_mla_fp8.py")
MTP = Step("mtp step", REPO / "contracts/mla_attention_mtp.yaml", REPO / "tasks/mla_attention_mtp/candidates/triton_mla_mtp.py")


@dataclass
class Checked:
    """A step checked on one shape: its row, the call to time (None where it failed), its reference stages and inputs."""

    row: dict
    call: object
    golden: dict
    inputs: dict


def full_cache_case(contract, name: str, dims: tuple[int, int, int]):
    """The shape as a case of `contract`: every request's cache full after its new rows, one seed for every step."""
    from ferret.contract.model import Case

    batch, heads, length = dims
    case_dims = {"B": batch, "H": heads, "L": length}
    tokens = "L - 1"
    if any("S" in c.dims for c in contract.cases_for("cpu")):  # a multi-token contract
        case_dims["S"], tokens = MTP_TOKENS, "L - S"
    edits = [{"input": "cache_lens", "set": "value", "value": tokens}]
    return Case.model_validate({"name": name, "dims": case_dims, "seed": 7, "edits": edits})


def _outputs(contract, case, device: str):
    import torch

    from ferret.gate.inputs import output_specs

    return {
        n: torch.full(s, float("nan"), dtype=d, device=device) for n, (s, d) in output_specs(contract, case, "bfloat16").items()
    }


def check_step(step: Step, shape: str, dims: tuple[int, int, int], device: str, device_name: str) -> Checked:
    """The step run once on a copy of its own contract's inputs for the shape, its o_heads checked against the float64
    reference within the contract's tolerance; then a call that times it on a private copy."""
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
    row = {"shape": shape, "impl": f"{step.label} ({step.candidate.name})", "device": device_name, "floor_us": floor}
    row["floor_peaks"] = peaks
    run = load_module(step.candidate).run
    limit = contract.tolerance("bfloat16", "o_heads").rel_l2
    outputs = _outputs(contract, case, device)
    try:
        run({k: v.clone() for k, v in inputs.items()}, outputs, params)
        error = rel_l2(outputs["o_heads"], golden["o_heads"])
        why = None if error <= limit else f"o_heads rel_l2 {error:.3e} > tolerance {limit:.3e}"
    except Exception as err:  # noqa: BLE001 - a step that fails to compile or launch is reported, not fatal
        why = f"{type(err).__name__}: {str(err).splitlines()[0][:300] if str(err) else ''}"
    row.update(ok=why is None, why=why)
    call = None
    if why is None:
        work, timed_outputs = {k: v.clone() for k, v in inputs.items()}, _outputs(contract, case, device)
        call = lambda: run(work, timed_outputs, params)  # noqa: E731 - the append writes the private copy's cache
    return Checked(row, call, golden, inputs)


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


def peer_row(label: str, shape: str, cpu: bool, measure) -> tuple[dict, object]:
    """FlashMLA's row: `measure(module)` gives (call, rel_l2 against float64, its limit); (row, call), the call None
    with the reason in the row where it is not to be timed."""
    row = {"shape": shape, "impl": label}
    module = flash_mla_module()
    if module is None or cpu:
        return {**row, "skipped": "GPU only" if module is not None else "flash_mla / sgl_flash_mla not importable"}, None
    try:
        call, error, limit = measure(module)
    except Exception as err:  # noqa: BLE001 - the peer's API differs between releases: report, never fail
        first_line = str(err).splitlines()[0][:200] if str(err) else ""
        return {**row, "skipped": f"FlashMLA call failed: {type(err).__name__}: {first_line}"}, None
    if error > limit:
        return {**row, "skipped": f"FlashMLA o_latent rel_l2 {error:.3e} > {limit:.3e}"}, None
    return {**row, "flash_mla_rel_l2": error}, call


def _pages(cache, page: int = 64):
    """A cache [B, L, 576] as FlashMLA's pages [B * L / 64, 64, 1, 576] in order, and its block table."""
    import torch

    batch, length, width = cache.shape
    pages = cache.reshape(batch * length // page, page, 1, width).contiguous()
    table = torch.arange(batch * length // page, dtype=torch.int32, device=cache.device).view(batch, -1)
    return pages, table


def flash_fp8(checked: Checked, params: dict, limit: float):
    """The measure of FlashMLA's dense FP8 core on the FP8 step's dequantized cache, quantized per tensor."""
    import torch

    from tasks.mla_attention import reference as ref
    from tasks.mla_attention_fp8.quant import dequantize

    golden, rank = checked.golden, params["kv_lora_rank"]

    def measure(module):
        cache = torch.cat([dequantize(golden["kv_latent"], golden["kv_scale"]), golden["kv_rope"].double()], dim=-1)
        q, q_descale = per_tensor_e4m3(torch.cat([golden["q_absorbed"], golden["q_pe_roped"]], dim=-1))
        codes, k_descale = per_tensor_e4m3(cache)
        pages, table = _pages(codes)
        seqlens = (checked.inputs["cache_lens"] + 1).to(torch.int32)
        meta, _ = module.get_mla_metadata()
        meta.tile_scheduler_metadata, meta.num_splits = module.get_mla_decoding_metadata(
            seqlens, q.shape[1], 1, is_fp8_kvcache=True, use_legacy=True
        )
        scale, q4 = ref.softmax_scale(params), q.unsqueeze(1).contiguous()

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

        given = attention_f64(q.double() * q_descale.double(), codes.double() * k_descale.double(), seqlens, scale, rank)
        return call, rel_l2(call()[0].squeeze(1), given), limit

    return measure


def flash_mtp(checked: Checked, params: dict, limit: float):
    """The measure of FlashMLA's dense bf16 core at s_q new tokens (causal) on the MTP step's appended cache, its
    o_latent checked against the contract's reference."""
    import torch

    from tasks.mla_attention import reference as ref

    golden, rank = checked.golden, params["kv_lora_rank"]

    def measure(module):
        q = torch.cat([golden["q_absorbed"], golden["q_pe_roped"]], dim=-1).to(torch.bfloat16).contiguous()
        pages, table = _pages(golden["kv_cache"].to(torch.bfloat16))
        seqlens = (checked.inputs["cache_lens"] + q.shape[1]).to(torch.int32)
        meta, _ = module.get_mla_metadata()
        scale = ref.softmax_scale(params)

        def call():
            return module.flash_mla_with_kvcache(
                q, pages, table, seqlens, rank, meta, None, softmax_scale=scale, causal=True, use_legacy=True
            )

        return call, rel_l2(call()[0], golden["o_latent"]), limit

    return measure


def ratio_row(shape: str, rows: list[dict], label: str, numerator: str, denominator: str) -> dict:
    """rows[numerator]'s time over rows[denominator]'s (by the start of their labels), and at the target shape of the
    FP8 comparison whether it meets its speed-up."""
    times = {r["impl"].split(" (")[0]: r.get("us") for r in rows}
    top, bottom = times.get(numerator), times.get(denominator)
    row = {"shape": shape, "impl": label, "speedup": top / bottom if top and bottom else None}
    if shape == TARGET[0] and denominator == FP8.label:
        row.update(target=TARGET[1], target_met=row["speedup"] is not None and row["speedup"] >= TARGET[1])
    return row


def fp8_rows(shape: str, dims, args, device: str, device_name: str) -> tuple[list[dict], list]:
    from ferret.contract.load import load_contract

    checked = [check_step(step, shape, dims, device, device_name) for step in (BF16, FP8)]
    contract = load_contract(FP8.contract)
    limit = contract.tolerance("bfloat16", "o_latent").rel_l2
    measure = flash_fp8(checked[1], dict(contract.params), limit)
    peer, call = peer_row("FlashMLA dense FP8 core (attention only)", shape, args.cpu, measure)
    return [c.row for c in checked] + [peer], [c.call for c in checked] + [call]


def mtp_rows(shape: str, dims, args, device: str, device_name: str) -> tuple[list[dict], list]:
    from ferret.contract.load import load_contract

    checked = check_step(MTP, shape, dims, device, device_name)
    contract = load_contract(MTP.contract)
    limit = contract.tolerance("bfloat16", "o_latent").rel_l2
    label = f"FlashMLA core at s_q = {MTP_TOKENS} (attention only)"
    peer, call = peer_row(label, shape, args.cpu, flash_mtp(checked, dict(contract.params), limit))
    return [checked.row, peer], [checked.call, call]


VARIANTS = {
    "fp8": (fp8_rows, ("fp8 step over bf16 step", BF16.label, FP8.label)),
    "mtp": (
        mtp_rows,
        (f"FlashMLA core at s_q = {MTP_TOKENS} over our whole step", f"FlashMLA core at s_q = {MTP_TOKENS}", MTP.label),
    ),
}


def run_shape(variant: str, shape: str, dims: tuple[int, int, int], args, device_name: str, clock) -> list[dict]:
    """The variant's implementations checked, the checked ones timed in interleaved rounds; every row, summary last."""
    import torch

    device = "cpu" if args.cpu else "cuda"
    make_rows, (label, numerator, denominator) = VARIANTS[variant]
    rows, calls = make_rows(shape, dims, args, device, device_name)
    for row in rows:
        row.update(variant=variant, device=device_name)
    timed_rounds([(row, "us", call) for row, call in zip(rows, calls, strict=True) if call is not None], args.rounds, clock)
    for row in rows:
        if row.get("us") and row.get("floor_us"):
            row["fraction_of_floor"] = row["floor_us"] / row["us"]
    if not args.cpu:
        torch.cuda.empty_cache()
    return [*rows, {**ratio_row(shape, rows, label, numerator, denominator), "variant": variant}]


def markdown(rows: list[dict]) -> str:
    lines = [
        "| variant | shape | implementation | us | floor us | of floor | speed-up | checked |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in rows:
        us = f"{r['us']:.1f}" if r.get("us") else ""
        floor = f"{r['floor_us']:.1f}" if r.get("floor_us") else ""
        frac = f"{100 * r['fraction_of_floor']:.1f}%" if r.get("fraction_of_floor") else ""
        speedup = f"{r['speedup']:.2f}x" if r.get("speedup") else ""
        if "target" in r:
            speedup += f" (target {r['target']}x: {'met' if r['target_met'] else 'not met'})"
        said = r.get("why") or r.get("skipped") or ("ok" if r.get("ok") or r.get("flash_mla_rel_l2") is not None else "")
        lines.append(f"| {r['variant']} | {r['shape']} | {r['impl']} | {us} | {floor} | {frac} | {speedup} | {said} |")
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks mla-served", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for mla-served-bench.jsonl and mla-served-bench.md")
    parser.add_argument("--variant", choices=[*VARIANTS, "both"], default="both", help="the FP8 cache, s_q = 2, or both")
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
    jsonl = args.out / "mla-served-bench.jsonl"
    for variant in list(VARIANTS) if args.variant == "both" else [args.variant]:
        for shape in args.shapes or list(shapes):
            started = time.monotonic()
            for row in run_shape(variant, shape, shapes[shape], args, device_name, clock):
                rows.append(row)
                with jsonl.open("a") as out:
                    out.write(json.dumps(row, default=str) + "\n")
            print(f"{variant} {shape}: {time.monotonic() - started:.0f} s", flush=True)
    (args.out / "mla-served-bench.md").write_text(markdown(rows))
    print(markdown(rows), flush=True)
    return 0
