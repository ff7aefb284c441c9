"""The paged FP8 contract's tolerance table, by the FP8 contract's method (tasks/mla_attention_fp8/derive_tolerances.py:
calibrate over the baseline and the Triton candidate, then the rules the math fixes, and first_token's own row),
over this contract's cases and its paged implementations.

    python -m tasks.mla_attention_fp8_paged.derive_tolerances [--seeds 8] [--margin 3] [--check-seeds 4]
"""
from __future__ import annotations

from tasks.mla_attention_fp8.derive_tolerances import ROOT, main

CONTRACT = ROOT / "contracts" / "mla_attention_fp8_paged.yaml"
CANDIDATE = ROOT / "tasks" / "mla_attention_fp8_paged" / "candidates" / "triton_mla_fp8_paged.py"

if __name__ == "__main__":
    main(CONTRACT, CANDIDATE, __doc__)
