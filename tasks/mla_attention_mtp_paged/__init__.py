"""DeepSeek-V3 MLA, one step of s_q query tokens per request over a paged KV cache (FlashMLA's s_q with vLLM's pages).

The multi-token task's math (tasks/mla_attention_mtp) over the paged layout of tasks/mla_attention_paged, both reused:
  layout          the paged layout's `arrange`, with each request owning the pages of its S new rows
  reference       the multi-token reference over the gathered pages, the S new rows written into their pages
  baseline        eager PyTorch: the pages gathered, the multi-token baseline, the new rows written back
  derive_tolerances  the multi-token contract's method, on this contract
  candidates/     triton_mla_mtp_paged.py (honest)
"""
