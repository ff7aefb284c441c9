"""The paged multi-token contract's tolerance table, by the multi-token contract's method and rules
(tasks/mla_attention_mtp/derive_tolerances.py: calibrate over the eager baseline and the Triton candidate, then the
bf16 contract's rules).

    python -m tasks.mla_attention_mtp_paged.derive_tolerances [--seeds 16] [--check-seeds 4]
"""

from __future__ import annotations

from tasks.mla_attention_mtp.derive_tolerances import ROOT, main

CONTRACT = ROOT / "contracts" / "mla_attention_mtp_paged.yaml"
CANDIDATE = ROOT / "tasks" / "mla_attention_mtp_paged" / "candidates" / "triton_mla_mtp_paged.py"

if __name__ == "__main__":
    main(CONTRACT, CANDIDATE, "tasks.mla_attention_mtp_paged")
