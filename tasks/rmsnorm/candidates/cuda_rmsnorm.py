"""CUDA C++ RMSNorm: y = x * rsqrt(mean(x^2) + eps) * weight, float32 math, one rounding to x's dtype.

One block of 256 threads per row: each thread sums the squares of a strided slice of the row in float32, the
block reduces the partial sums (warp shuffles, then shared memory), and a second pass over the row writes y. The
kernel is templated on the element type; the three instantiations the contract's dtypes need are exported by name.
A simple, correct kernel: speed is the Triton kernels' job.
"""

from __future__ import annotations

import torch

from ferret.backends import cuda

THREADS = 256

KERNELS = cuda.Source(r"""
#include <ferret/dtypes.cuh>

using ferret::from_float;
using ferret::to_float;

template <typename T>
__device__ void rmsnorm_row(const T* x, const T* weight, T* y, float* inv_rms, int n, long long stride_x,
                            long long stride_y, float eps) {
    __shared__ float partial[32];
    const long long row = blockIdx.x;
    const T* x_row = x + row * stride_x;
    float sum = 0.0f;
    for (int col = threadIdx.x; col < n; col += blockDim.x) {
        float v = to_float(x_row[col]);
        sum += v * v;
    }
    for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_down_sync(0xffffffffu, sum, offset);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0) partial[warp] = sum;
    __syncthreads();
    if (warp == 0) {
        sum = lane < (int)(blockDim.x / 32) ? partial[lane] : 0.0f;
        for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_down_sync(0xffffffffu, sum, offset);
        if (lane == 0) partial[0] = rsqrtf(sum / (float)n + eps);
    }
    __syncthreads();
    const float scale = partial[0];
    if (inv_rms != nullptr && threadIdx.x == 0) inv_rms[row] = scale;
    T* y_row = y + row * stride_y;
    for (int col = threadIdx.x; col < n; col += blockDim.x) {
        y_row[col] = from_float<T>(to_float(x_row[col]) * scale * to_float(weight[col]));
    }
}

extern "C" __global__ void rmsnorm_f32(const float* x, const float* w, float* y, float* inv_rms, int n,
                                       long long sx, long long sy, float eps) {
    rmsnorm_row<float>(x, w, y, inv_rms, n, sx, sy, eps);
}
extern "C" __global__ void rmsnorm_f16(const __half* x, const __half* w, __half* y, float* inv_rms, int n,
                                       long long sx, long long sy, float eps) {
    rmsnorm_row<__half>(x, w, y, inv_rms, n, sx, sy, eps);
}
extern "C" __global__ void rmsnorm_bf16(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y,
                                        float* inv_rms, int n, long long sx, long long sy, float eps) {
    rmsnorm_row<__nv_bfloat16>(x, w, y, inv_rms, n, sx, sy, eps);
}
""")

KERNEL_FOR = {torch.float32: "rmsnorm_f32", torch.float16: "rmsnorm_f16", torch.bfloat16: "rmsnorm_bf16"}


def run(inputs: dict[str, torch.Tensor], outputs: dict[str, torch.Tensor], params: dict,
        trace: dict | None = None) -> None:
    x, weight, y = inputs["x"], inputs["weight"], outputs["y"]
    if x.dim() != 2 or weight.shape != (x.shape[1],) or y.shape != x.shape:
        raise ValueError(f"expected x [M, N], weight [N], y [M, N]; got {x.shape}, {weight.shape}, {y.shape}")
    if x.stride(1) != 1 or y.stride(1) != 1 or weight.stride(0) != 1:
        raise ValueError("x, y and weight must have unit column stride")
    m, n = x.shape
    inv_rms = torch.empty(m, dtype=torch.float32, device=x.device) if trace is not None else None
    if m:
        KERNELS.launch(KERNEL_FOR[x.dtype], grid=(m,), block=(THREADS,),
                       args=(x, weight, y, inv_rms if inv_rms is not None else cuda.NULL, cuda.i32(n),
                             cuda.i64(x.stride(0)), cuda.i64(y.stride(0)), cuda.f32(params["eps"])))
    if trace is not None:
        trace["inv_rms"] = inv_rms
