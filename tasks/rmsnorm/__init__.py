"""RMSNorm over the last dimension, as DeepSeek-V3 applies it (q_a_layernorm, kv_a_layernorm, hidden norms).

Inputs: `x` [M, N] (float32, float16 or bfloat16) and `weight` [N]; params: `{"eps": 1e-6}`.
Stages, in order: `inv_rms` [M], then `y` [M, N], the only output, in x's dtype.
`reference.py` defines the math (float64), `baseline.py` is the PyTorch eager code a candidate replaces,
`candidates/` holds kernels following the candidate ABI.
"""

STAGES = ("inv_rms", "y")
OUTPUTS = ("y",)
DEFAULT_PARAMS = {"eps": 1e-6}
