"""Kernel 2's launch forms timed again, interleaved, to tell their differences from noise.

    PYTHONPATH=/tmp/site:$PWD python benchmarks/q_prepare_repeat.py --out DIR [--rounds 5] [--shapes 64:128,...]

Why: one do_bench median per variant (benchmarks/q_prepare_probe.py, H100 2026-12-06, session 33, call 2) moved by
up to 7x between launches of the same work (the one-wave form's B = 1 and B = 8 rows share their grids). Here each
round times every variant once, in turn (do_bench median, L2 flushed), and the rounds' median, min and max are
reported per variant, so a ranking holds only where the spreads do not overlap. Every variant's q, and cuBLAS's bmm of
the absorption alone (its columns of q), is checked against run()'s launch first (within one bf16 ulp and the
reordering of fp32 sums, `bitwise` said). GPU only.
Writes DIR/q-prepare-repeat.jsonl (one row per variant and shape) and prints each row.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "benchmarks")]

import q_prepare_probe as probe  # noqa: E402

# name: (launcher of q_prepare_probe, its variant); "run" is run()'s own launch of the streamed form
VARIANTS = {
    "run": ("streamed", (None, 256, 8)),
    "streamed 64 cols 4 warps": ("streamed", (None, 64, 4)),
    "one_wave 16x128 k32 4w 3st": ("one_wave", (16, 128, 32, 4, 3)),
    "one_wave 64x128 k32 4w 4st": ("one_wave", (64, 128, 32, 4, 4)),
    "one_wave 16x128 k128 4w": ("one_wave", (16, 128, 128, 4, 1)),
    "one_wave 64x128 k64 8w 2st": ("one_wave", (64, 128, 64, 8, 2)),
    "one_wave 128x256 k32 8w 3st": ("one_wave", (128, 256, 32, 8, 3)),
    "one_wave 64x256 k32 8w 3st": ("one_wave", (64, 256, 32, 8, 3)),
    "one_wave 16x64 k32 4w 3st": ("one_wave", (16, 64, 32, 4, 3)),
    "one_wave 32x128 k32 4w 3st": ("one_wave", (32, 128, 32, 4, 3)),
}


def launcher(module, form: str, variant):
    if form == "streamed":
        return lambda inputs, q, params: probe.launch(module, True, inputs, q, params, variant)
    return lambda inputs, q, params: probe.launch_wave(module, inputs, q, params, variant)


def bmm_launcher(inputs: dict):
    """cuBLAS's batched GEMM of the W_UK absorption alone (no rope): the call, and its [heads, batch, rank] output."""
    import torch

    q_nope, w_kv_b = inputs["q_nope"], inputs["w_kv_b"]
    batch, heads, nope = q_nope.shape
    w_uk = w_kv_b.view(heads, -1, w_kv_b.shape[1])[:, :nope, :]
    q_t = q_nope.transpose(0, 1)
    out = torch.empty(heads, batch, w_kv_b.shape[1], dtype=q_nope.dtype, device=q_nope.device)
    return lambda: torch.bmm(q_t, w_uk, out=out), out


def bmm_checked(inputs: dict, expected) -> dict:
    """The bmm's absorbed columns judged against run()'s q like the other forms (its rope columns taken from
    expected: the bmm computes none), once, before it is timed."""
    call, out = bmm_launcher(inputs)
    call()
    q = expected.clone()
    q[..., : out.shape[2]] = out.transpose(0, 1)
    return probe.within_one_rounding(q, expected, inputs)


def repeat_shape(module, batch: int, heads: int, params: dict, rounds: int, emit) -> None:
    import torch
    import triton

    from tasks.mla_attention.inputs import make_inputs

    inputs = {k: v.to("cuda") for k, v in make_inputs(batch, heads, 64, seed=batch + heads).items()}
    expected = torch.full((batch, heads, 576), float("nan"), dtype=torch.bfloat16, device="cuda")
    launcher(module, *VARIANTS["run"])(inputs, expected, params)
    timed, rows = {}, {}
    for name, (form, variant) in VARIANTS.items():
        q = torch.full_like(expected, float("nan"))
        launch = launcher(module, form, variant)
        launch(inputs, q, params)
        rows[name] = {"B": batch, "H": heads, "name": name, "form": form, "variant": variant,
                      **probe.within_one_rounding(q, expected, inputs)}
        timed[name] = lambda f=launch, qq=q: f(inputs, qq, params)
    timed["torch.bmm (W_UK absorption only)"] = bmm_launcher(inputs)[0]
    rows["torch.bmm (W_UK absorption only)"] = {"B": batch, "H": heads, "name": "torch.bmm (W_UK absorption only)",
                                                **bmm_checked(inputs, expected)}
    samples: dict[str, list[float]] = {name: [] for name in timed}
    for _ in range(rounds):
        for name, fn in timed.items():
            samples[name].append(1e3 * triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median"))
    for name, row in rows.items():
        us = samples[name]
        emit({**row, "median_us": round(statistics.median(us), 2), "min_us": round(min(us), 2),
              "max_us": round(max(us), 2), "rounds": [round(x, 2) for x in us]})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--shapes", default="64:128,128:128,8:128,1:128")
    args = parser.parse_args(argv)
    from mla_template_bench import CONTRACT, load_module, render_points

    from ferret.contract.load import load_contract

    args.out.mkdir(parents=True, exist_ok=True)
    rendered = render_points([{"side_kernels": "streamed"}], args.out / "points")
    module = load_module(rendered[0][1])
    params = dict(load_contract(CONTRACT).params)
    rows_file = args.out / "q-prepare-repeat.jsonl"

    def emit(row: dict) -> None:
        with rows_file.open("a") as out:
            out.write(json.dumps(row) + "\n")
        print(json.dumps(row), flush=True)

    for pair in args.shapes.split(","):
        batch, heads = (int(x) for x in pair.split(":"))
        repeat_shape(module, batch, heads, params, args.rounds, emit)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
