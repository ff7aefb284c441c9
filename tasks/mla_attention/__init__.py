"""DeepSeek-V3 multi-head latent attention (MLA), one decode step in the absorbed form.

Modules:
  reference       canonical float64 reference, stage by stage, plus the whole attention layer
  oracle          validation of the reference against transformers' DeepseekV3Attention
  baseline        the eager PyTorch kernel being replaced (bf16 matmuls, fp32 softmax)
  inputs          input distributions chosen so that attention is peaked, as in real models
  simplifications the four plausible simplifications a gate must catch, as one-line source edits
  candidates/     implementations to be judged (candidates/triton_mla.py: a Triton one)
"""
