"""DeepSeek-V3 rotary position embedding: YaRN frequencies, interleaved pairs, rotary head dim 64.

Inputs: `x` [T, H, 64] (float32, float16 or bfloat16; q_pe with H heads or k_pe with H = 1) and
`positions` [T] int64. Params: DEFAULT_PARAMS below, DeepSeek-V3's released config.
Stages, in order: `inv_freq` [32], `cos` [T, 32], `sin` [T, 32], then `y` [T, H, 64], the output.
`reference.py` defines the math (float64), `baseline.py` is the PyTorch code a candidate replaces,
`candidates/` holds kernels following the candidate ABI.
"""

STAGES = ("inv_freq", "cos", "sin", "y")
OUTPUTS = ("y",)
DEFAULT_PARAMS = {
    "rope_theta": 10000.0,
    "rope_scaling": {
        "type": "yarn",
        "factor": 40.0,
        "beta_fast": 32.0,
        "beta_slow": 1.0,
        "mscale": 1.0,
        "mscale_all_dim": 1.0,
        "original_max_position_embeddings": 4096,
    },
    "qk_rope_head_dim": 64,
}
