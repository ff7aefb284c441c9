"""DeepSeek-V3 MLA, one decode step in the absorbed form, over an FP8 KV cache (FlashMLA's layout).

The bf16 task's math (tasks/mla_attention), reused, over a cache stored as e4m3 codes with float32 scales.
Modules:
  quant           the appended row's quantization in float64, and where a faithful kernel may round the other way
  reference       float64: the row quantized, attention over the dequantized cache, the unquantized step beside it
  baseline        eager PyTorch: torch's e4m3 cast, the cache dequantized to bf16, the bf16 baseline's kernels
  derive_tolerances  the tolerance table by calibrate's method over the honest implementations
  candidates/     triton_mla_fp8.py (honest)
"""
