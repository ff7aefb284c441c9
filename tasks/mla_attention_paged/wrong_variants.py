"""Wrong variants of the paged candidate the gate must reject, as one-line edits of its source (the
contiguous task's way: tasks/variants.py), each written as a self-contained candidate file for the judge.

    path = write_variant("contiguous_pages", tmp_dir / "mla_paged_contiguous.py")
    module = load_variant("contiguous_pages", tmp_dir)
"""
from __future__ import annotations

from pathlib import Path

from tasks.variants import VariantFiles

CANDIDATE_PATH = Path(__file__).resolve().parent / "candidates" / "triton_mla_paged.py"

# name -> the (old line, new line) edits of candidates/triton_mla_paged.py
WRONG_VARIANTS: dict[str, list[tuple[str, str]]] = {
    # The attention ignores the block table: request b's logical page j read from pool page b * (L // 64) + j,
    # as if the pool were the contiguous cache [B, L, 576] cut into pages (the append still uses the table). Both
    # ways kernel 3 finds a row are cut: the TMA descriptors' page (the candidate's path) and the row pointers
    # (the trace's scores and probabilities).
    "contiguous_pages": [
        ("    pages = tl.load(block_table_ptr + b * stride_bt_b + t // PAGE_SIZE, mask=t_mask, other=0).to(tl.int64)",
         "    pages = (b * stride_bt_b + t // PAGE_SIZE).to(tl.int64)  # WRONG: block table ignored"),
        ("            page = tl.load(block_table_ptr + b * stride_bt_b + t0 // PAGE_SIZE)",
         "            page = b * stride_bt_b + t0 // PAGE_SIZE  # WRONG: block table ignored"),
    ],
}

_FILES = VariantFiles(lambda name: WRONG_VARIANTS[name], "_mla_paged_wrong", CANDIDATE_PATH)
variant_source, write_variant, load_variant = _FILES.source, _FILES.write, _FILES.load
