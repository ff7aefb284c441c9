"""CUDA C++ softmax along the last dim: y = exp(x - max) / sum(exp(x - max)), float32 math, one rounding to x's dtype.

One block of 256 threads per row, three passes over the row: the row's maximum (NaN kept, as the reference keeps
it), the sum of exponentials in float32, then y. A simple, correct kernel: speed is the Triton
kernels' job.
"""

from __future__ import annotations

import torch

from ferret.backends import cuda

THREADS = 256

KERNELS = cuda.Source(r"""
#include <ferret/dtypes.cuh>
#include <math_constants.h>

using ferret::from_float;
using ferret::to_float;

// The larger of two, NaN winning (fmaxf would drop it).
__device__ __forceinline__ float max_keeping_nan(float a, float b) { return (b > a || b != b) ? b : a; }

// The block's reduction of one value per thread: warp shuffles, then the warps' results in shared memory.
template <bool IS_MAX>
__device__ float block_reduce(float v, float* scratch) {
    for (int offset = 16; offset > 0; offset /= 2) {
        float other = __shfl_down_sync(0xffffffffu, v, offset);
        v = IS_MAX ? max_keeping_nan(v, other) : v + other;
    }
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    __syncthreads();  // scratch may still be read by the previous reduction
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < (int)(blockDim.x / 32) ? scratch[lane] : (IS_MAX ? -CUDART_INF_F : 0.0f);
        for (int offset = 16; offset > 0; offset /= 2) {
            float other = __shfl_down_sync(0xffffffffu, v, offset);
            v = IS_MAX ? max_keeping_nan(v, other) : v + other;
        }
        if (lane == 0) scratch[0] = v;
    }
    __syncthreads();
    return scratch[0];
}

template <typename T>
__device__ void softmax_row(const T* x, T* y, float* row_max, float* row_sum, int n, long long sx, long long sy) {
    __shared__ float scratch[32];
    const long long row = blockIdx.x;
    const T* x_row = x + row * sx;
    float m = -CUDART_INF_F;
    for (int col = threadIdx.x; col < n; col += blockDim.x) m = max_keeping_nan(m, to_float(x_row[col]));
    m = block_reduce<true>(m, scratch);
    float s = 0.0f;
    for (int col = threadIdx.x; col < n; col += blockDim.x) s += expf(to_float(x_row[col]) - m);
    s = block_reduce<false>(s, scratch);
    if (threadIdx.x == 0 && row_max != nullptr) { row_max[row] = m; row_sum[row] = s; }
    T* y_row = y + row * sy;
    for (int col = threadIdx.x; col < n; col += blockDim.x) y_row[col] = from_float<T>(expf(to_float(x_row[col]) - m) / s);
}

extern "C" __global__ void softmax_f32(const float* x, float* y, float* mx, float* sm, int n, long long sx, long long sy) {
    softmax_row<float>(x, y, mx, sm, n, sx, sy);
}
extern "C" __global__ void softmax_f16(const __half* x, __half* y, float* mx, float* sm, int n, long long sx, long long sy) {
    softmax_row<__half>(x, y, mx, sm, n, sx, sy);
}
extern "C" __global__ void softmax_bf16(const __nv_bfloat16* x, __nv_bfloat16* y, float* mx, float* sm, int n,
                                        long long sx, long long sy) {
    softmax_row<__nv_bfloat16>(x, y, mx, sm, n, sx, sy);
}
""")

KERNEL_FOR = {torch.float32: "softmax_f32", torch.float16: "softmax_f16", torch.bfloat16: "softmax_bf16"}


def run(inputs: dict[str, torch.Tensor], outputs: dict[str, torch.Tensor], params: dict,
        trace: dict | None = None) -> None:
    x, y = inputs["x"], outputs["y"]
    if params.get("dim", -1) not in (-1, x.dim() - 1):
        raise ValueError(f"only softmax along the last dimension is supported, got dim={params['dim']}")
    if x.dim() != 2 or y.shape != x.shape or x.stride(-1) != 1 or y.stride(-1) != 1:
        raise ValueError(f"expected x and y [M, N], contiguous along N; got {tuple(x.shape)}, {tuple(y.shape)}")
    m, n = x.shape
    stats = [torch.empty(m, dtype=torch.float32, device=x.device) for _ in range(2)] if trace is not None else None
    if m:
        row_max, row_sum = stats if stats is not None else (cuda.NULL, cuda.NULL)
        KERNELS.launch(KERNEL_FOR[x.dtype], grid=(m,), block=(THREADS,),
                       args=(x, y, row_max, row_sum, cuda.i32(n), cuda.i64(x.stride(0)), cuda.i64(y.stride(0))))
    if trace is not None and stats is not None:
        trace["row_max"], trace["row_sum"] = stats
