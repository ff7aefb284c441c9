"""Softmax along the last dimension of a [M, N] tensor, computed in float32, output in the input dtype.

Inputs: `x` [M, N] (float32, float16 or bfloat16); params: `{"dim": -1}` (only the last dim is defined).
Stages, in order: `row_max` [M], `row_sum` [M] (sum of exp(x - row_max)), then `y` [M, N], the output.
`reference.py` defines the math (float64) and its NaN/inf behaviour, `baseline.py` is the PyTorch code
a candidate replaces, `candidates/` holds kernels following the candidate ABI.
"""

STAGES = ("row_max", "row_sum", "y")
OUTPUTS = ("y",)
DEFAULT_PARAMS = {"dim": -1}
