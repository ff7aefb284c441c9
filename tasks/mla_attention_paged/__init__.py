"""DeepSeek-V3 MLA, one decode step in the absorbed form, over a paged KV cache (vLLM, SGLang, FlashMLA).

The same math as tasks/mla_attention, whose code it reuses; only the cache's addressing differs.
Modules:
  layout          the page layout: gather, the new token's slot, shuffled tables, the contract's case edits
  reference       float64: gather each request's pages, then the contiguous reference's stages
  baseline        eager PyTorch: gather, then the contiguous baseline, then write the new row into its page
  oracle          validation: the contiguous reference (itself checked against transformers) after un-paging
  candidates/     triton_mla_paged.py (honest), wrong_contiguous_pages.py (ignores the block table)
"""
