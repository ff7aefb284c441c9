"""The four plausible simplifications of MLA a faithful gate must catch, as one-line edits of the Triton
candidate's source, each with the first stage at which it must diverge from the reference.

    path = write_variant("theta", tmp_dir / "mla_theta.py")   # a candidate file for the judge
    module = load_variant("theta", tmp_dir)                   # or imported, same run(...) ABI

From the shell (scripts/demo.sh's negative control):

    python -m tasks.mla_attention.simplifications scale OUT.py         # writes the variant, prints OUT.py
    python -m tasks.mla_attention.simplifications --expected-stage scale   # prints "scores"
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import NamedTuple

from tasks.variants import VariantFiles

CANDIDATE_PATH = Path(__file__).resolve().parent / "candidates" / "triton_mla.py"

class Simplification(NamedTuple):
    old_line: str  # exactly one line of candidates/triton_mla.py
    new_line: str
    expected_first_stage: str  # the first stage (reference order) that must diverge


SIMPLIFICATIONS: dict[str, Simplification] = {
    # rope with plain theta-10000 frequencies instead of YaRN's
    "theta": Simplification(
        "_USE_YARN = True  # SWITCH rope: False gives plain theta^(-2i/d) frequencies instead of YaRN's",
        "_USE_YARN = False  # SIMPLIFIED: plain theta-10000 rope",
        "q_pe_roped",
    ),
    # softmax scale 1/sqrt(576), the width of the absorbed dot product, instead of mscale^2/sqrt(192)
    "scale": Simplification(
        '_SCALE_MODE = "mscale"  # SWITCH scale: "latent_width" gives 1/sqrt(576) instead of mscale^2/sqrt(192)',
        '_SCALE_MODE = "latent_width"  # SIMPLIFIED: softmax scale 1/sqrt(576)',
        "scores",
    ),
    # c_kv = c_kv_raw: kv_a_layernorm skipped
    "no_kv_norm": Simplification(
        "_APPLY_KV_NORM = True  # SWITCH kv norm: False writes c_kv_raw to the cache without kv_a_layernorm",
        "_APPLY_KV_NORM = False  # SIMPLIFIED: c_kv = c_kv_raw",
        "c_kv",
    ),
    # head-sum: one W_UV (the mean over heads) instead of each head's own
    "head_sum": Simplification(
        "_PER_HEAD_UV = True  # SWITCH un-absorption: False uses one W_UV shared by all heads (their mean)",
        "_PER_HEAD_UV = False  # SIMPLIFIED: head-sum, one W_UV for every head",
        "o_heads",
    ),
}


_FILES = VariantFiles(lambda name: [SIMPLIFICATIONS[name][:2]], "_mla_simplified", CANDIDATE_PATH)
variant_source, write_variant, load_variant = _FILES.source, _FILES.write, _FILES.load

# The same four, written in CUDA C++: the CUDA candidate carries the same switch lines.
CUDA_CANDIDATE_PATH = CANDIDATE_PATH.with_name("cuda_mla.py")
_CUDA_FILES = VariantFiles(lambda name: [SIMPLIFICATIONS[name][:2]], "_mla_cuda_simplified", CUDA_CANDIDATE_PATH)
cuda_variant_source, write_cuda_variant = _CUDA_FILES.source, _CUDA_FILES.write


def main(argv: list[str]) -> int:
    """`NAME OUT.py`: write simplification NAME of the Triton candidate to OUT.py and print the path;
    `--expected-stage NAME`: print the first stage at which NAME must diverge. Exit 2 on a bad usage."""
    names = ",".join(sorted(SIMPLIFICATIONS))
    usage = (f"usage: python -m tasks.mla_attention.simplifications {{{names}}} OUT.py\n"
             f"       python -m tasks.mla_attention.simplifications --expected-stage {{{names}}}")
    if len(argv) == 2 and argv[0] == "--expected-stage" and argv[1] in SIMPLIFICATIONS:
        print(SIMPLIFICATIONS[argv[1]].expected_first_stage)
        return 0
    if len(argv) == 2 and argv[0] in SIMPLIFICATIONS:
        print(write_variant(argv[0], argv[1]))
        return 0
    print(usage, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
