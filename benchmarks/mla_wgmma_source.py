"""The CUDA C++ source of a Hopper (sm_90a) split-KV MLA decode attention kernel on warpgroup MMA (wgmma), as text.

One CTA = 64 heads of one request x one split of its cache, two warpgroups (FlashMLA's division of the work):
  warpgroup 0  S = Q K^T over the 576-wide latent (36 wgmma m64n64k16, Q and K from shared memory), the online
               softmax in fp32, P (bf16) to shared memory for warpgroup 1, then O[:, 0:256] += P V[:, 0:256] with P
               from its own registers (4 wgmma m64n256k16)
  warpgroup 1  the cp.async loads (Q, then the cache tiles, two buffers), then O[:, 256:512] += P V[:, 256:512]
               with P from shared memory
Shared memory holds Q, two 64-token cache tiles (each a [64 rows, 576] bf16 block as nine 64-column chunks of
128-byte rows in the 128-byte swizzle the wgmma descriptors name), P and the row rescale factors: 225 KiB.
Writes what the Triton kernel 3 writes: per split normalized partials [B, H, splits, 512] fp32 and log-sum-exps
(base 2) [B, H, splits], lse -inf and no partial for a split past its request's tokens.

The asm operand lists of the wide wgmma instructions are spelled out here (128 accumulator registers), so the
text is generated once; the candidate holds the generated text as a literal.
"""

from __future__ import annotations


def _regs(first: int, count: int) -> str:
    return ", ".join(f"%{i}" for i in range(first, first + count))


def _wgmma_ss_n64() -> str:
    """S[32] (+)= A(smem desc) x B(smem desc), m64n64k16, both K-major."""
    outs = ", ".join(f'"+f"(d[{i}])' for i in range(32))
    return f'''
__device__ __forceinline__ void wgmma_m64n64k16_ss(float* d, u64 desc_a, u64 desc_b, int accumulate) {{
    asm volatile(
        "{{\\n.reg .pred p;\\nsetp.ne.b32 p, %34, 0;\\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {{{_regs(0, 32)}}}, %32, %33, p, 1, 1, 0, 0;\\n}}\\n"
        : {outs}
        : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}}
'''


def _wgmma_rs_n256() -> str:
    """O[128] += A(registers, 4 x b32) x B(smem desc, MN-major), m64n256k16."""
    outs = ", ".join(f'"+f"(d[{i}])' for i in range(128))
    return f'''
__device__ __forceinline__ void wgmma_m64n256k16_rs(float* d, u32 a0, u32 a1, u32 a2, u32 a3,
                                                    u64 desc_b) {{
    asm volatile(
        "{{\\n.reg .pred p;\\nsetp.ne.b32 p, %133, 0;\\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {{{_regs(0, 128)}}}, "
        "{{%128, %129, %130, %131}}, %132, p, 1, 1, 1;\\n}}\\n"
        : {outs}
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc_b), "r"(1));
}}
'''


def _wgmma_ss_n256() -> str:
    """O[128] += A(smem desc, K-major) x B(smem desc, MN-major), m64n256k16."""
    outs = ", ".join(f'"+f"(d[{i}])' for i in range(128))
    return f'''
__device__ __forceinline__ void wgmma_m64n256k16_ss(float* d, u64 desc_a, u64 desc_b) {{
    asm volatile(
        "{{\\n.reg .pred p;\\nsetp.ne.b32 p, %130, 0;\\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {{{_regs(0, 128)}}}, %128, %129, p, 1, 1, 0, 1;\\n}}\\n"
        : {outs}
        : "l"(desc_a), "l"(desc_b), "r"(1));
}}
'''


def _fence_operands(name: str, count: int) -> str:
    body = "\n".join(f'    asm volatile("" : "+f"(d[{i}]) :: "memory");' for i in range(count))
    return f"__device__ __forceinline__ void {name}(float* d) {{\n{body}\n}}\n"


HEADER = r'''
#include <cuda_bf16.h>

typedef __nv_bfloat16 bf16;
typedef unsigned char u8;
typedef unsigned int u32;
typedef unsigned long long u64;

#define RANK 512
#define WIDTH 576
#define BLOCK_H 64
#define BLOCK_N 64
#define CHUNKS 9
#define CHUNK_BYTES 8192
#define TILE_BYTES (CHUNKS * CHUNK_BYTES)
#define PIECES_PER_ROW 72
#define SMEM_Q 0
#define SMEM_KV (TILE_BYTES)
#define SMEM_P (3 * TILE_BYTES)
#define SMEM_SCALE (SMEM_P + 8192)
#define SMEM_SUM (SMEM_SCALE + 256)
#define SMEM_MAX (SMEM_SUM + 256)
#define SMEM_USED (SMEM_MAX + 256)
#define SMEM_ALIGN 1024

// named barriers (0 is __syncthreads)
#define BAR_FULL0 1
#define BAR_FULL1 2
#define BAR_P_READY 3
#define BAR_P_FREE 4
#define BAR_BUF_FREE0 5
#define BAR_BUF_FREE1 6

__device__ __forceinline__ void bar_sync(int id) { asm volatile("bar.sync %0, 256;" :: "r"(id) : "memory"); }
__device__ __forceinline__ void bar_arrive(int id) { asm volatile("bar.arrive %0, 256;" :: "r"(id) : "memory"); }
__device__ __forceinline__ void fence_async_shared() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N> __device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;" :: "n"(N) : "memory");
}
__device__ __forceinline__ void cp_async_16(u32 dst, const void* src, int bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" :: "r"(dst), "l"(src), "r"(bytes) : "memory");
}
#ifndef PREFETCH
#define PREFETCH 0
#endif
// Tiles `PREFETCH` ahead of the one being loaded are asked into L2 (one bulk prefetch of the tile's rows), so that
// the cp.async loads that follow hit L2.
__device__ __forceinline__ void prefetch_tile(const bf16* rows, long long row_stride, int valid_rows) {
    if (valid_rows <= 0) return;
    const int n = valid_rows < BLOCK_N ? valid_rows : BLOCK_N;
    const unsigned bytes = (unsigned)(((long long)(n - 1) * row_stride + WIDTH) * 2);
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" :: "l"(rows), "r"(bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;" :: "n"(N) : "memory");
}
#define NEG_INF __int_as_float(0xff800000)
// exp2 as the ex2.approx instruction (what Triton's tl.exp2 compiles to): exp2(-inf) = +0
__device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
__device__ __forceinline__ void st_shared_u32(u32 addr, u32 v) {
    asm volatile("st.shared.b32 [%0], %1;" :: "r"(addr), "r"(v) : "memory");
}

// A wgmma shared-memory descriptor, 128-byte swizzle (start, leading and stride byte offsets in 16-byte units).
__device__ __forceinline__ u64 smem_desc(u32 addr, u32 leading_bytes, u32 stride_bytes) {
    return (u64)((addr & 0x3FFFF) >> 4) | ((u64)(leading_bytes >> 4) << 16)
         | ((u64)(stride_bytes >> 4) << 32) | (1ull << 62);
}

__device__ __forceinline__ u32 pack_bf16(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<u32*>(&v);
}

// Byte offset of 16-byte piece `piece` (0..7) of row `row` in a [64 rows, 128 B] chunk, 128-byte swizzle.
__device__ __forceinline__ u32 swizzled(int row, int piece) {
    return (u32)(row * 128 + ((piece ^ (row & 7)) << 4));
}

// 64 rows of 576 bf16 from global (row r at base + r * row_stride) into a tile of nine swizzled chunks; rows at or
// past valid_rows are zero-filled (never read from global), so a padded row contributes exact zeros.
__device__ __forceinline__ void load_rows(u32 tile, const bf16* base, long long row_stride, int valid_rows,
                                          int thread) {
#pragma unroll 4
    for (int i = 0; i < (BLOCK_N * PIECES_PER_ROW) / 128; ++i) {
        const int piece = i * 128 + thread;
        const int row = piece / PIECES_PER_ROW;
        const int in_row = piece - row * PIECES_PER_ROW;
        const bool valid = row < valid_rows;
        const bf16* src = base + (long long)(valid ? row : 0) * row_stride + in_row * 8;
        cp_async_16(tile + (in_row >> 3) * CHUNK_BYTES + swizzled(row, in_row & 7), src, valid ? 16 : 0);
    }
}
'''

KERNEL = r'''
extern "C" __global__ void __launch_bounds__(256, 1) mla_wgmma_attention_kernel(
    const bf16* __restrict__ q, const bf16* __restrict__ cache, const int* __restrict__ cache_lens,
    float* __restrict__ partial, float* __restrict__ lse,
    int heads, int num_splits, int split_tiles,
    long long stride_q_b, long long stride_q_h, long long stride_cache_b, long long stride_cache_t,
    long long stride_part_b, long long stride_part_h, long long stride_part_s,
    long long stride_lse_b, long long stride_lse_h, float qk_scale_log2)
{
    extern __shared__ u8 smem_raw[];
    const int head0 = blockIdx.x * BLOCK_H;
    const int split = blockIdx.y;
    const int b = blockIdx.z;
    const int tokens = cache_lens[b] + 1;  // the appended row is attended to
    const int start = split * split_tiles * BLOCK_N;
    const int end = min(start + split_tiles * BLOCK_N, tokens);
    float* lse_row = lse + b * stride_lse_b + split;
    if (start >= end) {  // a split past the request's tokens: lse -inf, no partial (the merges weigh it 0)
        if (threadIdx.x < BLOCK_H && head0 + threadIdx.x < heads)
            lse_row[(head0 + threadIdx.x) * stride_lse_h] = NEG_INF;
        return;
    }
    const int tiles = (end - start + BLOCK_N - 1) / BLOCK_N;
    const u32 smem_base = (u32)__cvta_generic_to_shared(smem_raw);
    const u32 smem = (smem_base + SMEM_ALIGN - 1) & ~(u32)(SMEM_ALIGN - 1);
    u8* smem_ptr = smem_raw + (smem - smem_base);
    float* s_scale = reinterpret_cast<float*>(smem_ptr + SMEM_SCALE);
    float* s_sum = reinterpret_cast<float*>(smem_ptr + SMEM_SUM);
    float* s_max = reinterpret_cast<float*>(smem_ptr + SMEM_MAX);

    const int warpgroup = threadIdx.x / 128;
    const int thread = threadIdx.x % 128;
    const int lane = threadIdx.x % 32;
    const int quad = lane % 4;
    const int row0 = (thread / 32) * 16 + lane / 4;  // this thread's two rows of the accumulators
    const int row1 = row0 + 8;
    const bf16* cache_rows = cache + b * stride_cache_b;
    float o[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) o[i] = 0.0f;

    if (warpgroup == 1) {
        // ---- loads, and O[:, 256:512] ----
        load_rows(smem + SMEM_Q, q + b * stride_q_b + head0 * stride_q_h, stride_q_h, heads - head0, thread);
        load_rows(smem + SMEM_KV, cache_rows + (long long)start * stride_cache_t, stride_cache_t, tokens - start,
                  thread);
        cp_async_commit();
        if (PREFETCH > 0 && thread == 0)
            for (int t = 2; t < 2 + PREFETCH && t < tiles; ++t)
                prefetch_tile(cache_rows + (long long)(start + t * BLOCK_N) * stride_cache_t, stride_cache_t,
                              tokens - start - t * BLOCK_N);
        if (tiles > 1)
            load_rows(smem + SMEM_KV + TILE_BYTES, cache_rows + (long long)(start + BLOCK_N) * stride_cache_t,
                      stride_cache_t, tokens - start - BLOCK_N, thread);
        cp_async_commit();
        cp_async_wait<1>();
        fence_async_shared();
        bar_arrive(BAR_FULL0);
        for (int j = 0; j < tiles; ++j) {
            const u32 kv = smem + SMEM_KV + (j & 1) * TILE_BYTES;
            bar_sync(BAR_P_READY);
            const float r0 = s_scale[row0], r1 = s_scale[row1];
#pragma unroll
            for (int i = 0; i < 32; ++i) {
                o[4 * i] *= r0; o[4 * i + 1] *= r0; o[4 * i + 2] *= r1; o[4 * i + 3] *= r1;
            }
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < 4; ++kk)
#ifndef SKIP_PV
                wgmma_m64n256k16_ss(o, smem_desc(smem + SMEM_P + kk * 32, 16, 1024),
                                    smem_desc(kv + 4 * CHUNK_BYTES + kk * 2048, PV_LEADING, PV_STRIDE));
#endif
            wgmma_commit();
            if (j + 1 < tiles) {
                cp_async_wait<0>();
                fence_async_shared();
                bar_arrive(((j + 1) & 1) ? BAR_FULL1 : BAR_FULL0);
            }
            wgmma_wait<0>();
            fence_operands_128(o);
            if (j + 1 < tiles) bar_arrive(BAR_P_FREE);
            if (j + 2 < tiles) {
                bar_sync((j & 1) ? BAR_BUF_FREE1 : BAR_BUF_FREE0);
                const int t0 = start + (j + 2) * BLOCK_N;
                if (PREFETCH > 0 && thread == 0 && j + 2 + PREFETCH < tiles)
                    prefetch_tile(cache_rows + (long long)(t0 + PREFETCH * BLOCK_N) * stride_cache_t, stride_cache_t,
                                  tokens - t0 - PREFETCH * BLOCK_N);
#ifndef SKIP_LOADS
                load_rows(kv, cache_rows + (long long)t0 * stride_cache_t, stride_cache_t, tokens - t0, thread);
#endif
                cp_async_commit();
            }
        }
    } else {
        // ---- S = Q K^T, softmax, P, O[:, 0:256] ----
        float m0 = NEG_INF, m1 = NEG_INF, l0 = 0.0f, l1 = 0.0f;
        for (int j = 0; j < tiles; ++j) {
            const u32 kv = smem + SMEM_KV + (j & 1) * TILE_BYTES;
            const int t0 = start + j * BLOCK_N;
            bar_sync((j & 1) ? BAR_FULL1 : BAR_FULL0);
            float s[32];
            wgmma_fence();
#ifdef SKIP_QK
            for (int i = 0; i < 32; ++i) s[i] = 0.0f;
            if (0)
#endif
#pragma unroll
            for (int c = 0; c < CHUNKS; ++c) {
#pragma unroll
                for (int kk = 0; kk < 4; ++kk)
                    wgmma_m64n64k16_ss(s, smem_desc(smem + SMEM_Q + c * CHUNK_BYTES + kk * 32, 16, 1024),
                                       smem_desc(kv + c * CHUNK_BYTES + kk * 32, 16, 1024), (c | kk) != 0);
            }
            wgmma_commit();
            wgmma_wait<0>();
            fence_operands_32(s);
#ifdef SKIP_SOFTMAX
            u32 p[16];
            const float r0 = 1.0f, r1 = 1.0f;
#pragma unroll
            for (int i = 0; i < 8; ++i) { p[2 * i] = pack_bf16(s[4 * i], s[4 * i + 1]); p[2 * i + 1] = pack_bf16(s[4 * i + 2], s[4 * i + 3]); }
            l0 += 1.0f; l1 += 1.0f;
#else
            float mx0 = NEG_INF, mx1 = NEG_INF;
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                const int col = t0 + 8 * i + 2 * quad;
                s[4 * i] = col < end ? s[4 * i] * qk_scale_log2 : NEG_INF;
                s[4 * i + 1] = col + 1 < end ? s[4 * i + 1] * qk_scale_log2 : NEG_INF;
                s[4 * i + 2] = col < end ? s[4 * i + 2] * qk_scale_log2 : NEG_INF;
                s[4 * i + 3] = col + 1 < end ? s[4 * i + 3] * qk_scale_log2 : NEG_INF;
                mx0 = fmaxf(mx0, fmaxf(s[4 * i], s[4 * i + 1]));
                mx1 = fmaxf(mx1, fmaxf(s[4 * i + 2], s[4 * i + 3]));
            }
            mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
            mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
            mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
            mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
            const float n0 = fmaxf(m0, mx0), n1 = fmaxf(m1, mx1);
            const float r0 = fast_exp2(m0 - n0), r1 = fast_exp2(m1 - n1);
            m0 = n0; m1 = n1;
            u32 p[16];
            float sum0 = 0.0f, sum1 = 0.0f;
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                const float e0 = fast_exp2(s[4 * i] - n0), e1 = fast_exp2(s[4 * i + 1] - n0);
                const float e2 = fast_exp2(s[4 * i + 2] - n1), e3 = fast_exp2(s[4 * i + 3] - n1);
                sum0 += e0 + e1; sum1 += e2 + e3;
                p[2 * i] = pack_bf16(e0, e1);
                p[2 * i + 1] = pack_bf16(e2, e3);
            }
            l0 = l0 * r0 + sum0;
            l1 = l1 * r1 + sum1;
#endif
            if (j > 0) bar_sync(BAR_P_FREE);
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                st_shared_u32(smem + SMEM_P + swizzled(row0, i) + quad * 4, p[2 * i]);
                st_shared_u32(smem + SMEM_P + swizzled(row1, i) + quad * 4, p[2 * i + 1]);
            }
            if (quad == 0) { s_scale[row0] = r0; s_scale[row1] = r1; }
            fence_async_shared();
            bar_arrive(BAR_P_READY);
#pragma unroll
            for (int i = 0; i < 32; ++i) {
                o[4 * i] *= r0; o[4 * i + 1] *= r0; o[4 * i + 2] *= r1; o[4 * i + 3] *= r1;
            }
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < 4; ++kk)
#ifndef SKIP_PV
                wgmma_m64n256k16_rs(o, p[4 * kk], p[4 * kk + 1], p[4 * kk + 2], p[4 * kk + 3],
                                    smem_desc(kv + kk * 2048, PV_LEADING, PV_STRIDE));
#endif
            wgmma_commit();
            wgmma_wait<0>();
            fence_operands_128(o);
            if (j + 2 < tiles) bar_arrive((j & 1) ? BAR_BUF_FREE1 : BAR_BUF_FREE0);
        }
        l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
        l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
        l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
        l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
        if (quad == 0) { s_sum[row0] = l0; s_sum[row1] = l1; s_max[row0] = m0; s_max[row1] = m1; }
    }
    __syncthreads();
    // ---- the normalized partial of this split, and its log-sum-exp ----
    const float l0 = s_sum[row0], l1 = s_sum[row1];
    const int column0 = warpgroup * 256 + 2 * quad;
    if (head0 + row0 < heads) {
        float* out = partial + b * stride_part_b + (head0 + row0) * stride_part_h + split * stride_part_s + column0;
#pragma unroll
        for (int i = 0; i < 32; ++i)
            *reinterpret_cast<float2*>(out + 8 * i) = make_float2(o[4 * i] / l0, o[4 * i + 1] / l0);
        if (warpgroup == 0 && quad == 0) lse_row[(head0 + row0) * stride_lse_h] = s_max[row0] + log2f(l0);
    }
    if (head0 + row1 < heads) {
        float* out = partial + b * stride_part_b + (head0 + row1) * stride_part_h + split * stride_part_s + column0;
#pragma unroll
        for (int i = 0; i < 32; ++i)
            *reinterpret_cast<float2*>(out + 8 * i) = make_float2(o[4 * i + 2] / l1, o[4 * i + 3] / l1);
        if (warpgroup == 0 && quad == 0) lse_row[(head0 + row1) * stride_lse_h] = s_max[row1] + log2f(l1);
    }
}
'''

SMEM_BYTES = 3 * 9 * 8192 + 8192 + 3 * 256 + 1024  # what the kernel's layout uses, plus the alignment slack


def source(pv_leading: int = 8192, pv_stride: int = 1024, switches: tuple[str, ...] = ()) -> str:
    """The translation unit. pv_leading / pv_stride: the P@V operand's descriptor offsets (MN-major, 128-byte
    swizzle: between 64-column chunks, between 8-row groups)."""
    defines = f"#define PV_LEADING {pv_leading}\n#define PV_STRIDE {pv_stride}\n" + "".join(
        f"#define {name.replace('=', ' ')}\n" for name in switches)
    return (HEADER + defines + _wgmma_ss_n64() + _wgmma_rs_n256() + _wgmma_ss_n256()
            + _fence_operands("fence_operands_32", 32) + _fence_operands("fence_operands_128", 128) + KERNEL)
