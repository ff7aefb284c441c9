"""DeepSeek-V3 MLA, one decode step in the absorbed form, over a paged FP8 KV cache (FlashMLA's layout, in pages).

The FP8 task's math (tasks/mla_attention_fp8), reused, over pools of 64-row pages addressed by a block table as the
paged task's (tasks/mla_attention_paged/layout.py).
Modules:
  layout          the block table and the NaN of unowned pages, in the three pools
  reference       float64: gather each request's pages, the FP8 reference's stages, the new row written into its page
  baseline        eager PyTorch: gather, the FP8 baseline, the new row written back into its page
  candidates/     triton_mla_fp8_paged.py (honest)
"""
