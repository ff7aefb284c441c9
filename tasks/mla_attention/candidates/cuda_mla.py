"""CUDA C++ candidate: one DeepSeek-V3 MLA decode step in the absorbed form, simple and correct, not fast.

Four kernels, in stream order, each with one block per request (and head):
  1. kv_append   kv_a_layernorm of c_kv_raw, YaRN rope of k_pe, append row `len` to the cache
  2. q_prepare   q_abs = q_nope @ W_UK per head and YaRN rope of q_pe, packed as q = q_abs | q_pe_roped [B, H, 576]
  3. attention   per (request, head): the 576-wide scores over every cached token (a warp a token), their float32
                 softmax, and o_latent = probs @ c_kv, all in float32 (scores and probs kept in global scratch)
  4. unabsorb    o_heads = o_latent @ W_UV_h^T per head
Each head re-reads the whole cache: the step moves about H times the bytes it must (speed is the Triton kernel's
job). The traced run launches the same kernels, then one that reads the appended rows back; the other stages are views
of what the kernels wrote, and copies.

The four switch lines are the Triton candidate's, word for word: tasks/mla_attention/simplifications.py derives
the same four simplified variants from this file (`cuda_variant_source`).
"""
from __future__ import annotations

import math

import torch

from ferret.backends import cuda

KV_LORA_RANK = 512
QK_NOPE_HEAD_DIM = 128
QK_ROPE_HEAD_DIM = 64
V_HEAD_DIM = 128

# ------------------------------------------------------------------------------------------------
# Switch points. Tests derive simplified variants by replacing exactly one of these lines.
# ------------------------------------------------------------------------------------------------
_USE_YARN = True  # SWITCH rope: False gives plain theta^(-2i/d) frequencies instead of YaRN's
_SCALE_MODE = "mscale"  # SWITCH scale: "latent_width" gives 1/sqrt(576) instead of mscale^2/sqrt(192)
_APPLY_KV_NORM = True  # SWITCH kv norm: False writes c_kv_raw to the cache without kv_a_layernorm
_PER_HEAD_UV = True  # SWITCH un-absorption: False uses one W_UV shared by all heads (their mean)

KERNELS = cuda.Source(r"""
#include <ferret/dtypes.cuh>
#include <math_constants.h>

using ferret::from_float;
using ferret::to_float;
typedef __nv_bfloat16 bf16;

#define RANK 512
#define ROPE 64
#define NOPE 128
#define VDIM 128
#define WIDTH 576
#define WARPS 8  // blocks of 256 threads

__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

__device__ __forceinline__ float max_keeping_nan(float a, float b) { return (b > a || b != b) ? b : a; }

// One value per warp (lane 0's) combined over the block's warps in a fixed order; every thread gets the result.
__device__ float over_warps(float v, float* scratch, bool is_max) {
    __syncthreads();  // scratch may still be read by an earlier call
    if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
    __syncthreads();
    float r = scratch[0];
    for (int w = 1; w < (int)(blockDim.x / 32); ++w) r = is_max ? max_keeping_nan(r, scratch[w]) : r + scratch[w];
    return r;
}

// Interleaved rope of one pair: (x[2i], x[2i+1]) rotated by position * inv_freq[i].
__device__ __forceinline__ void rope_pair(const bf16* in, bf16* out, int i, float position, const float* inv_freq,
                                          float magnitude) {
    float s, c;
    sincosf(position * inv_freq[i], &s, &c);
    c *= magnitude;
    s *= magnitude;
    const float even = to_float(in[2 * i]), odd = to_float(in[2 * i + 1]);
    out[2 * i] = from_float<bf16>(even * c - odd * s);
    out[2 * i + 1] = from_float<bf16>(odd * c + even * s);
}

extern "C" __global__ void kv_append(const bf16* kv_a, const bf16* gamma, const float* inv_freq,
                                     const long long* positions, const int* cache_lens, bf16* cache, long long s_kv_a,
                                     long long s_cb, long long s_ct, float eps, float magnitude, int apply_norm) {
    __shared__ float scratch[32];
    const long long b = blockIdx.x;
    const bf16* in = kv_a + b * s_kv_a;
    bf16* out = cache + b * s_cb + (long long)cache_lens[b] * s_ct;
    const int i = threadIdx.x;
    float v0 = to_float(in[i]), v1 = to_float(in[i + 256]);
    if (apply_norm) {
        const float scale = rsqrtf(over_warps(warp_sum(v0 * v0 + v1 * v1), scratch, false) / RANK + eps);
        v0 = v0 * scale * to_float(gamma[i]);
        v1 = v1 * scale * to_float(gamma[i + 256]);
    }
    out[i] = from_float<bf16>(v0);
    out[i + 256] = from_float<bf16>(v1);
    if (i < ROPE / 2) rope_pair(in + RANK, out + RANK, i, (float)positions[b], inv_freq, magnitude);
}

extern "C" __global__ void q_prepare(const bf16* q_nope, const bf16* q_pe, const bf16* w, const float* inv_freq,
                                     const long long* positions, bf16* q, long long s_nb, long long s_nh,
                                     long long s_pb, long long s_ph, long long s_w, long long s_qb, long long s_qh,
                                     float magnitude) {
    __shared__ float nope[NOPE];
    const long long b = blockIdx.x, h = blockIdx.y;
    if (threadIdx.x < NOPE) nope[threadIdx.x] = to_float(q_nope[b * s_nb + h * s_nh + threadIdx.x]);
    __syncthreads();
    bf16* row = q + b * s_qb + h * s_qh;
    const bf16* w_uk = w + h * (NOPE + VDIM) * s_w;  // rows h*256 .. h*256+127: W_UK_h [NOPE, RANK]
    for (int c = threadIdx.x; c < RANK; c += blockDim.x) {
        float acc = 0.0f;
        for (int k = 0; k < NOPE; ++k) acc += nope[k] * to_float(w_uk[k * s_w + c]);
        row[c] = from_float<bf16>(acc);
    }
    if (threadIdx.x < ROPE / 2) {
        rope_pair(q_pe + b * s_pb + h * s_ph, row + RANK, threadIdx.x, (float)positions[b], inv_freq, magnitude);
    }
}

extern "C" __global__ void attention(const bf16* q, const bf16* cache, const int* cache_lens, float* scores,
                                     float* probs, float* o_latent, long long s_qb, long long s_qh, long long s_cb,
                                     long long s_ct, long long s_sb, long long s_sh, long long s_ob, long long s_oh,
                                     float scale, int capacity, int fill_rest) {
    __shared__ float qs[WIDTH];
    __shared__ float scratch[32];
    const long long b = blockIdx.x, h = blockIdx.y;
    const int tokens = cache_lens[b] + 1;  // the appended row is attended to
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    for (int i = threadIdx.x; i < WIDTH; i += blockDim.x) qs[i] = to_float(q[b * s_qb + h * s_qh + i]);
    __syncthreads();
    const bf16* rows = cache + b * s_cb;
    float* s_row = scores + b * s_sb + h * s_sh;
    float* p_row = probs + b * s_sb + h * s_sh;
    float local_max = -CUDART_INF_F;
    for (int t = warp; t < tokens; t += WARPS) {
        const bf16* kv = rows + (long long)t * s_ct;
        float acc = 0.0f;
        for (int i = lane; i < WIDTH; i += 32) acc += qs[i] * to_float(kv[i]);
        const float s = warp_sum(acc) * scale;
        if (lane == 0) s_row[t] = s;
        local_max = max_keeping_nan(local_max, s);
    }
    const float row_max = over_warps(local_max, scratch, true);  // its barriers also publish s_row
    float local_sum = 0.0f;
    for (int t = threadIdx.x; t < tokens; t += blockDim.x) {
        const float p = expf(s_row[t] - row_max);
        p_row[t] = p;
        local_sum += p;
    }
    const float inverse = 1.0f / over_warps(warp_sum(local_sum), scratch, false);
    for (int t = threadIdx.x; t < tokens; t += blockDim.x) p_row[t] *= inverse;  // the same t as above: no race
    if (fill_rest) {
        for (int t = tokens + threadIdx.x; t < capacity; t += blockDim.x) { s_row[t] = -CUDART_INF_F; p_row[t] = 0.0f; }
    }
    __syncthreads();
    float a0 = 0.0f, a1 = 0.0f;
    for (int t = 0; t < tokens; ++t) {
        const float p = p_row[t];
        const bf16* kv = rows + (long long)t * s_ct;
        a0 += p * to_float(kv[threadIdx.x]);
        a1 += p * to_float(kv[threadIdx.x + 256]);
    }
    o_latent[b * s_ob + h * s_oh + threadIdx.x] = a0;
    o_latent[b * s_ob + h * s_oh + threadIdx.x + 256] = a1;
}

// Trace only: the appended row of each request, read back from the cache (c_kv | k_pe_roped), as float32.
extern "C" __global__ void read_appended(const bf16* cache, const int* cache_lens, float* c_kv, float* k_pe,
                                         long long s_cb, long long s_ct) {
    const long long b = blockIdx.x;
    const bf16* row = cache + b * s_cb + (long long)cache_lens[b] * s_ct;
    for (int i = threadIdx.x; i < WIDTH; i += blockDim.x) {
        const float v = to_float(row[i]);
        if (i < RANK) c_kv[b * RANK + i] = v; else k_pe[b * ROPE + i - RANK] = v;
    }
}

extern "C" __global__ void unabsorb(const float* o_latent, const bf16* w, bf16* o_heads, long long s_ob,
                                    long long s_oh, long long s_w, long long s_hb, long long s_hh, int heads,
                                    int per_head_uv) {
    __shared__ float latent[RANK];
    const long long b = blockIdx.x, h = blockIdx.y;
    for (int i = threadIdx.x; i < RANK; i += blockDim.x) latent[i] = o_latent[b * s_ob + h * s_oh + i];
    __syncthreads();
    const int j = threadIdx.x;  // blocks of VDIM threads
    float acc = 0.0f;
    for (int c = 0; c < RANK; ++c) {
        float w_uv;
        if (per_head_uv) {
            w_uv = to_float(w[(h * (NOPE + VDIM) + NOPE + j) * s_w + c]);
        } else {  // the head-sum simplification: one W_UV, the mean over heads
            w_uv = 0.0f;
            for (int g = 0; g < heads; ++g) w_uv += to_float(w[((long long)g * (NOPE + VDIM) + NOPE + j) * s_w + c]);
            w_uv /= heads;
        }
        acc += latent[c] * w_uv;
    }
    o_heads[b * s_hb + h * s_hh + j] = from_float<bf16>(acc);
}
""")


# ------------------------------------------------------------------------------------------------
# YaRN math, on the host in float64 (the kernels get fp32 frequencies and a scalar scale)
# ------------------------------------------------------------------------------------------------
def _yarn_mscale(factor: float, mscale: float) -> float:
    return 1.0 if factor <= 1.0 else 0.1 * mscale * math.log(factor) + 1.0


def _rope_inv_freq_values(params: dict) -> list[float]:
    """theta^(-2i/d), blended toward theta^(-2i/d) / factor over YaRN's ramp (pairs 10..23 for DeepSeek-V3)."""
    dim, base = params["qk_rope_head_dim"], float(params["rope_theta"])
    plain = [base ** (-2.0 * i / dim) for i in range(dim // 2)]
    yarn = params.get("rope_scaling")
    if not _USE_YARN or not yarn:
        return plain
    original = yarn["original_max_position_embeddings"]

    def correction_dim(rotations: float) -> float:
        return dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low = max(math.floor(correction_dim(yarn["beta_fast"])), 0)
    high = min(math.ceil(correction_dim(yarn["beta_slow"])), dim - 1)
    width = (high - low) if high != low else 0.001
    ramp = [min(max((i - low) / width, 0.0), 1.0) for i in range(dim // 2)]
    return [f * (1.0 - r) + f / yarn["factor"] * r for f, r in zip(plain, ramp, strict=True)]


def _rope_magnitude(params: dict) -> float:
    """cos/sin factor mscale/mscale_all_dim: 1.0 for DeepSeek-V3 (its correction lives in the scale)."""
    yarn = params.get("rope_scaling")
    if not _USE_YARN or not yarn:
        return 1.0
    if yarn.get("mscale") and yarn.get("mscale_all_dim"):
        return _yarn_mscale(yarn["factor"], yarn["mscale"]) / _yarn_mscale(yarn["factor"], yarn["mscale_all_dim"])
    return _yarn_mscale(yarn["factor"], 1.0)


def _softmax_scale(params: dict) -> float:
    if _SCALE_MODE == "latent_width":
        return 1.0 / math.sqrt(params["kv_lora_rank"] + params["qk_rope_head_dim"])
    scale = 1.0 / math.sqrt(params["qk_nope_head_dim"] + params["qk_rope_head_dim"])
    yarn = params.get("rope_scaling")
    if yarn and yarn.get("mscale_all_dim"):
        m = _yarn_mscale(yarn["factor"], yarn["mscale_all_dim"])
        scale *= m * m
    return scale


def _check(params: dict, tensors: dict[str, torch.Tensor]) -> None:
    q_dtype = tensors["q_nope"].dtype
    expected = {"kv_lora_rank": KV_LORA_RANK, "qk_nope_head_dim": QK_NOPE_HEAD_DIM,
                "qk_rope_head_dim": QK_ROPE_HEAD_DIM, "v_head_dim": V_HEAD_DIM}
    for name, value in expected.items():
        if params[name] != value:
            raise ValueError(f"kernels are specialized for {name}={value}, got {params[name]}")
    for name, tensor in tensors.items():
        if tensor.stride(-1) != 1:
            raise ValueError(f"{name} must be contiguous in its last dimension")
        if tensor.is_floating_point() and tensor.dtype != q_dtype:
            raise ValueError(f"{name} must be {q_dtype} like q_nope (the kernels read bfloat16), got {tensor.dtype}")


def run(inputs: dict[str, torch.Tensor], outputs: dict[str, torch.Tensor], params: dict,
        trace: dict | None = None) -> None:
    q_nope, q_pe, kv_a = inputs["q_nope"], inputs["q_pe"], inputs["kv_a"]
    gamma, w_kv_b = inputs["kv_a_norm_weight"], inputs["w_kv_b"]
    positions, cache_lens, kv_cache = inputs["positions"], inputs["cache_lens"], inputs["kv_cache"]
    o_heads = outputs["o_heads"]
    _check(params, {"q_nope": q_nope, "q_pe": q_pe, "kv_a": kv_a, "kv_a_norm_weight": gamma, "w_kv_b": w_kv_b,
                    "kv_cache": kv_cache, "o_heads": o_heads})
    batch, heads, _ = q_nope.shape
    capacity, device = kv_cache.shape[1], kv_cache.device
    if batch == 0:
        return
    inv_freq = torch.tensor(_rope_inv_freq_values(params), dtype=torch.float32, device=device)
    magnitude = _rope_magnitude(params)
    q = torch.empty((batch, heads, KV_LORA_RANK + QK_ROPE_HEAD_DIM), dtype=q_nope.dtype, device=device)
    scores = torch.empty((batch, heads, capacity), dtype=torch.float32, device=device)
    probs = torch.empty_like(scores)
    o_latent = torch.empty((batch, heads, KV_LORA_RANK), dtype=torch.float32, device=device)

    KERNELS.launch("kv_append", grid=(batch,), block=(256,), args=(
        kv_a, gamma, inv_freq, positions, cache_lens, kv_cache, cuda.i64(kv_a.stride(0)), cuda.i64(kv_cache.stride(0)),
        cuda.i64(kv_cache.stride(1)), cuda.f32(params["rms_norm_eps"]), cuda.f32(magnitude),
        cuda.i32(int(_APPLY_KV_NORM))))
    KERNELS.launch("q_prepare", grid=(batch, heads), block=(256,), args=(
        q_nope, q_pe, w_kv_b, inv_freq, positions, q, cuda.i64(q_nope.stride(0)), cuda.i64(q_nope.stride(1)),
        cuda.i64(q_pe.stride(0)), cuda.i64(q_pe.stride(1)), cuda.i64(w_kv_b.stride(0)), cuda.i64(q.stride(0)),
        cuda.i64(q.stride(1)), cuda.f32(magnitude)))
    KERNELS.launch("attention", grid=(batch, heads), block=(256,), args=(
        q, kv_cache, cache_lens, scores, probs, o_latent, cuda.i64(q.stride(0)), cuda.i64(q.stride(1)),
        cuda.i64(kv_cache.stride(0)), cuda.i64(kv_cache.stride(1)), cuda.i64(scores.stride(0)),
        cuda.i64(scores.stride(1)), cuda.i64(o_latent.stride(0)), cuda.i64(o_latent.stride(1)),
        cuda.f32(_softmax_scale(params)), cuda.i32(capacity), cuda.i32(int(trace is not None))))
    KERNELS.launch("unabsorb", grid=(batch, heads), block=(V_HEAD_DIM,), args=(
        o_latent, w_kv_b, o_heads, cuda.i64(o_latent.stride(0)), cuda.i64(o_latent.stride(1)),
        cuda.i64(w_kv_b.stride(0)), cuda.i64(o_heads.stride(0)), cuda.i64(o_heads.stride(1)), cuda.i32(heads),
        cuda.i32(int(_PER_HEAD_UV))))
    if trace is not None:
        c_kv = torch.empty((batch, KV_LORA_RANK), dtype=torch.float32, device=device)
        k_pe = torch.empty((batch, QK_ROPE_HEAD_DIM), dtype=torch.float32, device=device)
        KERNELS.launch("read_appended", grid=(batch,), block=(256,), args=(
            kv_cache, cache_lens, c_kv, k_pe, cuda.i64(kv_cache.stride(0)), cuda.i64(kv_cache.stride(1))))
        trace.update({
            "c_kv": c_kv,
            "q_pe_roped": q[..., KV_LORA_RANK:],
            "k_pe_roped": k_pe,
            "kv_cache": kv_cache.clone(),
            "q_absorbed": q[..., :KV_LORA_RANK],
            "scores": scores,
            "probs": probs,
            "o_latent": o_latent,
            "o_heads": o_heads.clone(),
        })
