"""DeepSeek-V3 MLA, one decode step of s_q query tokens per request (multi-token prediction / speculative decoding).

Modules:
  reference       float64 reference: per query token i, the single-token decode math (tasks/mla_attention) over
                  cache rows 0 .. cache_lens[b] + i, after all s_q new rows are appended
  baseline        the eager PyTorch step (the bf16 baseline's kernels, a causal mask over the new tokens)
  derive_tolerances  the tolerance table, by the bf16 contract's method
  candidates/     implementations to be judged (candidates/triton_mla_mtp.py: a Triton one)
"""
