"""One MLA decode step of template points and FlashMLA's dense decode core on the same inputs, for Nsight Compute.

    ncu --clock-control none --set full -k 'regex:attention_kernel|merge_splits|mla' -o REPORT \\
        python benchmarks/mla_ncu.py --shapes h128_b64_l4096 h128_b8_l4096 [--point ...] [--candidate FILE]

Per shape, in this order: each point's whole step once (its output checked against the reference within the
contract's tolerance, so a wrong kernel is named, not profiled silently), then FlashMLA's core once (its o_latent
checked). Each is one launch of each of its kernels: the profiler's filter picks which of them it measures (ncu replays
a kernel with the caches flushed before every pass). Shapes, points and the FlashMLA call are
benchmarks/mla_template_bench.py's. Prints one line per launch made, so the profiler's report can be read against it.
--absorb-bmm: then cuBLAS's batched GEMM of kernel 2's absorption (q_nope @ W_UK per head, torch.bmm, no rope) once,
checked against the float32 product, so that the profiler can put kernel 2 beside the library's kernel for the same
product. Each point's step runs in the NVTX range `step`, FlashMLA's call in `flashmla` and the bmm in `absorb_bmm`,
so that the profiler can take those apart from the reference's own GEMMs: `ncu --nvtx --nvtx-include step/
--nvtx-include flashmla/ --nvtx-include absorb_bmm/ -k 'regex:q_prepare|mla|gemm|nvjet|xmma|cutlass' ...`.
A benchmark helper, not a gate.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def bench_module():
    spec = importlib.util.spec_from_file_location("mla_template_bench", REPO / "benchmarks" / "mla_template_bench.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def parse_args(argv: list[str] | None, bench) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", nargs="+", required=True, help="shape names of mla_template_bench.py")
    parser.add_argument("--point", action="append", default=None, type=bench.parse_point,
                        help="what differs from the space's default (repeatable; default: the default point)")
    parser.add_argument("--candidate", action="append", default=[], type=Path, metavar="FILE",
                        help="also a candidate file, launched after the points")
    parser.add_argument("--out", type=Path, default=Path("/tmp/mla-ncu"), help="folder for the rendered points")
    parser.add_argument("--absorb-bmm", action="store_true",
                        help="also cuBLAS's bmm of kernel 2's absorption once per shape, for the profiler")
    return parser.parse_args(argv)


def absorb_bmm(inputs: dict):
    """q_nope @ W_UK for every head through cuBLAS (torch.bmm): [H, B, RANK] in the inputs' dtype."""
    import torch

    return torch.bmm(inputs["q_nope"].transpose(0, 1), _w_uk(inputs))


def absorb_error(inputs: dict, product) -> float:
    """Relative L2 error of `product` against q_nope @ W_UK in float32, computed on the host (so that no GEMM but the
    profiled one runs on the GPU after the reference)."""
    import torch

    expected = torch.bmm(inputs["q_nope"].cpu().transpose(0, 1).float(), _w_uk(inputs).cpu().float())
    return float((product.cpu().float() - expected).norm() / expected.norm())


def _w_uk(inputs: dict):
    """W_UK_h for every head, [H, NOPE, RANK]: the first NOPE rows of each head's block of kv_b_proj."""
    _batch, heads, nope = inputs["q_nope"].shape
    rank = inputs["w_kv_b"].shape[1]
    return inputs["w_kv_b"].view(heads, -1, rank)[:, :nope, :]


def launch_shape(bench, contract, points, shape_name: str, spec: dict, with_bmm: bool = False) -> None:
    import torch

    from tasks.mla_attention import reference as ref

    params = dict(contract.params)
    inputs = {k: v.to("cuda") for k, v in spec["inputs"]().items()}
    golden = ref.reference(inputs, params)
    limit = contract.tolerance("bfloat16", "o_heads").rel_l2
    for approach, path in points:
        with torch.cuda.nvtx.range("step"):  # the profiler can pick a point's kernels by this range (--nvtx-include step/)
            why = bench.check(bench.load_module(path).run, inputs, params, golden["o_heads"], limit)
        print(f"{shape_name}: {approach}: {'launched, checked' if why is None else why}", flush=True)
    latent_limit = contract.tolerance("bfloat16", "o_latent").rel_l2
    with torch.cuda.nvtx.range("flashmla"):  # the peer's kernels, for the profiler (--nvtx-include flashmla/)
        flash, _call = bench.flash_mla_row(golden, inputs, params, latent_limit, cpu=False)
    print(f"{shape_name}: FlashMLA core: {flash}", flush=True)
    if with_bmm:
        with torch.cuda.nvtx.range("absorb_bmm"):
            product = absorb_bmm(inputs)
            torch.cuda.synchronize()
        error = absorb_error(inputs, product)
        print(f"{shape_name}: torch.bmm of the absorption: rel_l2 {error:.2e} against the float32 product", flush=True)
    torch.cuda.synchronize()


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(REPO))
    bench = bench_module()
    args = parse_args(argv, bench)
    from ferret.contract.load import load_contract

    contract = load_contract(bench.CONTRACT)
    points = bench.render_points(args.point if args.point is not None else [{}], args.out / "points")
    points += bench.candidate_points(args.candidate)
    for shape_name, spec in bench.shape_list(args.shapes, False, contract):
        launch_shape(bench, contract, points, shape_name, spec, args.absorb_bmm)
    return 0


if __name__ == "__main__":
    sys.exit(main())
