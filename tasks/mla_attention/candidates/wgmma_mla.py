"""Triton candidate: one DeepSeek-V3 MLA decode step in the absorbed form.

Four kernels, in stream order:
  1. _kv_append_kernel          kv_a_layernorm of c_kv_raw, YaRN rope of k_pe, append row `len` to the cache
  2. _q_prepare_kernel          q_abs = q_nope @ W_UK per head (a [B,128]x[128,512] GEMM per head) and YaRN
                                rope of q_pe, packed as q = q_abs | q_pe_roped [B, H, 576]
  3. _split_kv_attention_kernel flash-decoding over the 576-wide latent cache: BLOCK_H heads share every
                                cache tile load, each program owns one slice of the sequence (split-KV),
                                online softmax in fp32; writes per-split normalized partials and log-sum-exp
  4. _merge_splits_kernel       merges the splits of each (request, head) row into o_latent [B, H, 512]
     (_merge_row_kernel         the same, one row a program, where there are few rows)
     _unabsorb_kernel           un-absorbs per head as a GEMM over the batch, o_heads = o_latent @ W_UV_h^T
Traced runs launch the same kernels with the same arguments (so the final output is bitwise the fast
path's), then trace-only kernels: one reads the appended cache rows back (c_kv, k_pe_roped), one recomputes
the scores and turns them into probabilities with kernel 3's own log-sum-exp. q_absorbed and q_pe_roped are
kernel 2's output, o_latent the merge's (what the un-absorption read).

Sizing (H200): at 16/32 heads the step is memory bound and every cache byte is read once per head block;
at 128 heads it is compute bound and head blocks keep the cache re-reads in L2. Kernel 3's block sizes and
split count come from the point of Ferret's MLA kernel template (tasks/mla_attention/templates) below:
head_block=64, token_block=64, num_warps=8,
num_stages=2, min_tokens_per_split=256, programs_per_sm=1, split_chunk=balanced
(the batch's tiles cut into equal runs, programs_per_sm per SM over the head blocks, each run at least
min_tokens_per_split tokens; a run may cross from one request into the next, so every program walks the same tiles
whatever the lengths).
Structure: head_pad=16 (fewest rows of a head block), value_split=1 (P@V as
1 dot(s) over the 512-wide latent), split_policy=waves (how the split count is chosen),
side_kernels=streamed (kernel 2 in 64-column blocks, rope apart; kernel 4 as a streamed merge of the splits,
_merge_splits_kernel, then the un-absorption as a GEMM over the batch rows of a head, _unabsorb_kernel).
Kernel 3's tile loop: loop_schedule=plain, kv_loads=descriptors (cache tiles through tensor descriptors (TMA)),
rescale=every_tile (the accumulator rescaled on every tile).
attention_kernel=wgmma: on a GPU of compute capability 9.0, for requests of more than WGMMA_MIN_HEADS heads, kernel 3
is _WGMMA_ATTENTION, CUDA C++ on Hopper's warpgroup MMA (64-head CTAs of two warpgroups, the cache's tiles shared by
QK^T and both halves of P@V in shared memory, splits per request), writing the same partials and log-sum-exps;
the point above sizes Triton's kernel 3 elsewhere. The file imports ferret.backends.cuda, so it is a CUDA candidate:
the judge runs it on a GPU only.
launch_overlap=pdl_all: on a GPU of compute capability 9.0 or more, kernels 2, 3 and 4 are launched as programmatic
dependents (Triton's launch_pdl; the wgmma kernel 3 through the driver's cuLaunchKernelEx) of the kernel before them,
so each starts while the one before it ends, and waits for it (griddepcontrol.wait) before it reads what that kernel
wrote: kernel 1 lets kernel 2 start at once (kernel 2 reads nothing kernel 1 writes, and waits for it before it ends,
so that kernel 3 finds the appended row); kernel 2 lets kernel 3 start at once, and kernel 3 waits for it before it
reads q or the appended row (the wgmma kernel 3 loads its first two tiles' older rows before that wait: no kernel of
the call writes them);
the wgmma kernel 3 lets the merge start at once (Triton's kernel 3, where it runs, when it ends);
the merge lets the un-absorption start, and the un-absorption loads its W_UV slice before it waits.
Kernel 1 is launched as usual, so nothing of one call overlaps the call before it. Nothing persists across calls.
Elsewhere (the CPU interpreter) the same kernels run without the wait and launch instructions.
"""
from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from ferret.backends import cuda

KV_LORA_RANK = 512
QK_NOPE_HEAD_DIM = 128
QK_ROPE_HEAD_DIM = 64
V_HEAD_DIM = 128

# Kernel 3's sizing: the template point (see _attention_config).
HEAD_BLOCK = 64
TOKEN_BLOCK = 64
NUM_WARPS = 8
NUM_STAGES = 2
MIN_TOKENS_PER_SPLIT = 256
# attention_kernel=wgmma: kernel 3 on Hopper's warpgroup MMA (CUDA C++, _WGMMA_ATTENTION below) on a GPU of compute
# capability 9.0, for requests of more than WGMMA_MIN_HEADS heads (64-head blocks; fewer heads are zero rows of one,
# where the step is bound by the cache's bytes and Triton's balanced runs share ragged lengths better: on the H200,
# tp8_b32_l8192's kernel 3 took 78.3 us in Triton against 98.6); elsewhere kernel 3 is Triton's, as the point sizes it. Splits per request (whole 64-token tiles, at least
# WGMMA_MIN_SPLIT_TILES a split, at most 64: the merges' split vector) by _wave_filling_splits over the SMs (one CTA
# an SM: 225 KiB of shared memory).
WGMMA_MIN_HEADS = 32
WGMMA_BLOCK_H = 64
WGMMA_BLOCK_N = 64
WGMMA_MIN_SPLIT_TILES = 2
WGMMA_MAX_SPLITS = 64
WGMMA_SHARED_BYTES = 3 * 9 * 8192 + 8192 + 3 * 256 + 1024  # Q, two tiles, P, three row vectors, 1024-byte alignment
PROGRAMS_PER_SM = 1
# Few compilations whatever the shape (specialize=none): on a GPU, kernels 2 and 4 take 16 rows up to 16 requests
# and 64 above (two compilations at most), the merge reads a vector of MAX_SPLITS log-sum-exps (the
# split count never exceeds it), and size arguments are not specialized on their values (Triton compiles again for a
# 1, or for a multiple of 16).
MAX_SPLITS = 64

# ------------------------------------------------------------------------------------------------
# Switch points. Tests derive simplified variants by replacing exactly one of these lines.
# ------------------------------------------------------------------------------------------------
_USE_YARN = True  # SWITCH rope: False gives plain theta^(-2i/d) frequencies instead of YaRN's
_SCALE_MODE = "mscale"  # SWITCH scale: "latent_width" gives 1/sqrt(576) instead of mscale^2/sqrt(192)
_APPLY_KV_NORM = True  # SWITCH kv norm: False writes c_kv_raw to the cache without kv_a_layernorm
_PER_HEAD_UV = True  # SWITCH un-absorption: False uses one W_UV shared by all heads (their mean)


# ------------------------------------------------------------------------------------------------
# YaRN math, on the host in float64 (the kernels get fp32 frequencies and a scalar scale)
# ------------------------------------------------------------------------------------------------
def _yarn_mscale(factor: float, mscale: float) -> float:
    return 1.0 if factor <= 1.0 else 0.1 * mscale * math.log(factor) + 1.0


def _yarn_correction_range(dim: int, base: float, yarn: dict) -> tuple[int, int]:
    """Pair indices where YaRN's ramp starts and ends: (10, 23) for DeepSeek-V3."""
    original = yarn["original_max_position_embeddings"]

    def correction_dim(rotations: float) -> float:
        return dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low = math.floor(correction_dim(yarn["beta_fast"]))
    high = math.ceil(correction_dim(yarn["beta_slow"]))
    return max(low, 0), min(high, dim - 1)


def _rope_inv_freq_values(params: dict) -> list[float]:
    dim, base = params["qk_rope_head_dim"], float(params["rope_theta"])
    plain = [base ** (-2.0 * i / dim) for i in range(dim // 2)]
    yarn = params.get("rope_scaling")
    if not _USE_YARN or not yarn:
        return plain
    low, high = _yarn_correction_range(dim, base, yarn)
    width = (high - low) if high != low else 0.001
    ramp = [min(max((i - low) / width, 0.0), 1.0) for i in range(dim // 2)]
    return [f * (1.0 - r) + f / yarn["factor"] * r for f, r in zip(plain, ramp)]


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


_LOG2E = 1.4426950408889634
# Cody-Waite split of 2*pi: k * _TWO_PI_HI is exact for k < 2^16, i.e. angles up to ~400k rad.
_TWO_PI_HI = tl.constexpr(6.28125)
_TWO_PI_LO = tl.constexpr(0.0019353071795864769)
_INV_TWO_PI = tl.constexpr(0.15915494309189535)


# Triton 3.9's CPU interpreter (INTERPRETED=True) gets two bf16 operations wrong: tl.dot multiplies the raw
# bit patterns, and fp32 -> bf16 casts truncate instead of rounding to nearest even. The two helpers below
# make it compute what the GPU computes; on the GPU they compile to the plain operation.
@triton.jit
def _dot_operand(x, INTERPRETED: tl.constexpr):
    """bf16 products are exact in fp32, so widening gives the same fp32-accumulated dot."""
    if INTERPRETED:
        return x.to(tl.float32)
    return x


@triton.jit
def _round_to(x, dtype: tl.constexpr, INTERPRETED: tl.constexpr):
    """fp32 -> dtype with round-to-nearest-even (bias the bits so that the interpreter's truncation rounds)."""
    if INTERPRETED:
        if dtype == tl.bfloat16:
            bits = x.to(tl.uint32, bitcast=True)
            bits = bits + 0x7FFF + ((bits >> 16) & 1)
            x = bits.to(tl.float32, bitcast=True)
    return x.to(dtype)


@triton.jit
def _cos_sin(angle):
    """cos/sin of fp32 angles up to ~16k rad, reduced to [-pi, pi] first so that fast hardware sin/cos
    (accurate only near zero) may be used."""
    turns = tl.floor(angle * _INV_TWO_PI + 0.5)
    reduced = (angle - turns * _TWO_PI_HI) - turns * _TWO_PI_LO
    return tl.cos(reduced), tl.sin(reduced)


# ------------------------------------------------------------------------------------------------
# 1. kv_a_layernorm + rope(k_pe) + cache append
# ------------------------------------------------------------------------------------------------
@triton.jit
def _kv_append_kernel(
    kv_a_ptr, gamma_ptr, inv_freq_ptr, positions_ptr, cache_lens_ptr, cache_ptr,
    stride_kv_a_b, stride_cache_b, stride_cache_t,
    eps, rope_magnitude,
    RANK: tl.constexpr, ROPE: tl.constexpr, APPLY_NORM: tl.constexpr, INTERPRETED: tl.constexpr,
    GDC: tl.constexpr,
):
    if GDC:
        # kernel 2 may start now: it reads nothing written here, and waits for this kernel before it ends
        tl.extra.cuda.gdc_launch_dependents()
    b = tl.program_id(0).to(tl.int64)  # b * stride_cache_b passes 2^31 for large caches
    out_dtype = cache_ptr.dtype.element_ty
    row_in = kv_a_ptr + b * stride_kv_a_b
    row_out = cache_ptr + b * stride_cache_b + tl.load(cache_lens_ptr + b).to(tl.int64) * stride_cache_t

    latent_offs = tl.arange(0, RANK)
    latent = tl.load(row_in + latent_offs).to(tl.float32)
    if APPLY_NORM:
        mean_square = tl.sum(latent * latent, axis=0) / RANK
        latent = latent * tl.rsqrt(mean_square + eps) * tl.load(gamma_ptr + latent_offs).to(tl.float32)
    c_kv = _round_to(latent, out_dtype, INTERPRETED)
    tl.store(row_out + latent_offs, c_kv)

    pair = tl.arange(0, ROPE // 2)
    even = tl.load(row_in + RANK + 2 * pair).to(tl.float32)
    odd = tl.load(row_in + RANK + 2 * pair + 1).to(tl.float32)
    angle = tl.load(positions_ptr + b).to(tl.float32) * tl.load(inv_freq_ptr + pair)
    cos, sin = _cos_sin(angle)
    cos = cos * rope_magnitude
    sin = sin * rope_magnitude
    roped_even = _round_to(even * cos - odd * sin, out_dtype, INTERPRETED)
    roped_odd = _round_to(odd * cos + even * sin, out_dtype, INTERPRETED)
    tl.store(row_out + RANK + 2 * pair, roped_even)
    tl.store(row_out + RANK + 2 * pair + 1, roped_odd)


# ------------------------------------------------------------------------------------------------
# 2. absorption q_nope @ W_UK_h and rope(q_pe) -> q [B, H, RANK + ROPE]
# ------------------------------------------------------------------------------------------------
@triton.jit(do_not_specialize=["batch"])
def _q_prepare_kernel(
    q_nope_ptr, q_pe_ptr, w_kv_b_ptr, inv_freq_ptr, positions_ptr, q_ptr,
    batch,
    stride_nope_b, stride_nope_h, stride_pe_b, stride_pe_h, stride_w_row, stride_q_b, stride_q_h,
    rope_magnitude,
    RANK: tl.constexpr, NOPE: tl.constexpr, ROPE: tl.constexpr, V_DIM: tl.constexpr,
    BLOCK_B: tl.constexpr, BLOCK_C: tl.constexpr, INTERPRETED: tl.constexpr,
    GDC: tl.constexpr,
):
    """Programs (h, batch block, c): c < RANK / BLOCK_C computes BLOCK_C columns of q_nope @ W_UK_h for the
    block's rows; the last c ropes q_pe (so no GEMM program waits on the rope)."""
    if GDC:
        # kernel 3 may launch now (launch_overlap=pdl_all): it waits for this kernel before it reads q
        tl.extra.cuda.gdc_launch_dependents()
    h = tl.program_id(0)
    rows = tl.program_id(1) * BLOCK_B + tl.arange(0, BLOCK_B)
    row_mask = rows < batch
    out_dtype = q_ptr.dtype.element_ty
    q_rows = q_ptr + rows[:, None] * stride_q_b + h * stride_q_h
    if tl.program_id(2) < RANK // BLOCK_C:
        nope_offs = tl.arange(0, NOPE)
        q_nope = tl.load(q_nope_ptr + rows[:, None] * stride_nope_b + h * stride_nope_h + nope_offs[None, :],
                         mask=row_mask[:, None], other=0.0)
        cols = tl.program_id(2) * BLOCK_C + tl.arange(0, BLOCK_C)
        # W_UK_h is rows h*(NOPE+V) .. h*(NOPE+V)+NOPE-1 of kv_b_proj: [NOPE, RANK]
        w_uk = tl.load(w_kv_b_ptr + (h * (NOPE + V_DIM) + nope_offs)[:, None] * stride_w_row + cols[None, :])
        q_abs = tl.dot(_dot_operand(q_nope, INTERPRETED), _dot_operand(w_uk, INTERPRETED))
        tl.store(q_rows + cols[None, :], _round_to(q_abs, out_dtype, INTERPRETED), mask=row_mask[:, None])
    else:
        pair = tl.arange(0, ROPE // 2)
        pe_rows = q_pe_ptr + rows[:, None] * stride_pe_b + h * stride_pe_h
        even = tl.load(pe_rows + 2 * pair[None, :], mask=row_mask[:, None], other=0.0).to(tl.float32)
        odd = tl.load(pe_rows + 2 * pair[None, :] + 1, mask=row_mask[:, None], other=0.0).to(tl.float32)
        pos = tl.load(positions_ptr + rows, mask=row_mask, other=0).to(tl.float32)
        angle = pos[:, None] * tl.load(inv_freq_ptr + pair)[None, :]
        cos, sin = _cos_sin(angle)
        cos = cos * rope_magnitude
        sin = sin * rope_magnitude
        tl.store(q_rows + RANK + 2 * pair[None, :], _round_to(even * cos - odd * sin, out_dtype, INTERPRETED),
                 mask=row_mask[:, None])
        tl.store(q_rows + RANK + 2 * pair[None, :] + 1, _round_to(odd * cos + even * sin, out_dtype, INTERPRETED),
                 mask=row_mask[:, None])
    if GDC:
        # started beside kernel 1 (launch_pdl): this kernel ends only after it, so kernel 3 finds the appended row
        tl.extra.cuda.gdc_wait()


@triton.jit
def _request_tiles(cache_lens_ptr, batch, b0, BLOCK_N: tl.constexpr, LENS_BLOCK: tl.constexpr):
    """Requests b0 .. b0 + LENS_BLOCK - 1: their tiles of BLOCK_N attended rows (0 past the batch), and the mask."""
    requests = b0 + tl.arange(0, LENS_BLOCK)
    in_batch = requests < batch
    tokens = tl.load(cache_lens_ptr + requests, mask=in_batch, other=0).to(tl.int32) + 1
    return tl.where(in_batch, tl.cdiv(tokens, BLOCK_N), 0), in_batch


@triton.jit
def _batch_tiles(cache_lens_ptr, batch, BLOCK_N: tl.constexpr, LENS_BLOCK: tl.constexpr):
    """The batch's tiles: every request's attended rows in tiles of BLOCK_N."""
    total = 0
    for b0 in range(0, batch, LENS_BLOCK):
        tiles, _ = _request_tiles(cache_lens_ptr, batch, b0, BLOCK_N, LENS_BLOCK)
        total += tl.sum(tiles, axis=0)
    return total


@triton.jit
def _requests_of_run(cache_lens_ptr, batch, first, last, BLOCK_N: tl.constexpr, LENS_BLOCK: tl.constexpr):
    """The requests [b_first, b_end) whose tiles meet the run [first, last) of the batch's tiles (the requests'
    tiles laid one after the other), and the tiles before b_first."""
    b_first = 0
    b_end = 0
    tiles_before = 0
    preceding = 0
    for b0 in range(0, batch, LENS_BLOCK):
        tiles, in_batch = _request_tiles(cache_lens_ptr, batch, b0, BLOCK_N, LENS_BLOCK)
        through = preceding + tl.cumsum(tiles, axis=0)  # tiles up to and including each request
        before_run = in_batch & (through <= first)
        b_first += tl.sum(before_run.to(tl.int32), axis=0)
        tiles_before += tl.sum(tl.where(before_run, tiles, 0), axis=0)
        b_end += tl.sum((in_batch & (through - tiles < last)).to(tl.int32), axis=0)
        preceding += tl.sum(tiles, axis=0)
    return b_first, tiles_before, b_end


# ------------------------------------------------------------------------------------------------
# 3. split-KV flash decoding over the latent cache
# ------------------------------------------------------------------------------------------------
@triton.jit(do_not_specialize=["heads", "num_splits", "batch", "programs", "min_tiles", "stride_lse_b", "stride_lse_h"])
def _split_kv_attention_kernel(
    q_ptr, cache_ptr, cache_lens_ptr, partial_ptr, lse_ptr,
    heads, num_splits,
    batch, programs, min_tiles,
    stride_q_b, stride_q_h, stride_cache_b, stride_cache_t,
    stride_part_b, stride_part_h, stride_part_s, stride_lse_b, stride_lse_h,
    qk_scale_log2,
    RANK: tl.constexpr, ROPE: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr, INTERPRETED: tl.constexpr,
    GDC: tl.constexpr,
    LENS_BLOCK: tl.constexpr, SPLITS_POW2: tl.constexpr,
):
    if GDC:
        # a programmatic dependent of kernel 2 (launch_overlap=pdl_all): kernel 2 writes q, and ends after kernel 1
        tl.extra.cuda.gdc_wait()
    # split_chunk=balanced: the batch's tiles (each request's attended rows in BLOCK_N-row tiles, the requests one
    # after the other) cut into `programs` equal runs, one per program of each head block (FlashMLA's scheduling):
    # every program walks the same number of tiles whatever the lengths, a run crossing from one request into the
    # next stores one split of each. A request's split index is its run's program less the program of its first
    # tile, so the merges read the usual [B, H, splits] layout; the run ending a request stores lse = -inf in the
    # request's split slots no run filled (the merges weight them 0 and never load their partials).
    head_block = tl.program_id(0)
    program = tl.program_id(1)
    h = head_block * BLOCK_H + tl.arange(0, BLOCK_H)
    h_mask = h < heads
    total = _batch_tiles(cache_lens_ptr, batch, BLOCK_N, LENS_BLOCK)
    run = tl.maximum(tl.cdiv(total, programs), min_tiles)
    first = program * run
    last = tl.minimum(first + run, total)
    b_first, tiles_before, b_end = _requests_of_run(cache_lens_ptr, batch, first, last, BLOCK_N, LENS_BLOCK)
    b = b_first  # a tensor, carried by the loop (a range's index is a Python int under the interpreter)
    for _ in range(b_first, b_end):
        tokens = tl.load(cache_lens_ptr + b).to(tl.int32) + 1  # the appended row is attended to
        request_tiles = tl.cdiv(tokens, BLOCK_N)
        start = (tl.maximum(first, tiles_before) - tiles_before) * BLOCK_N
        end = tl.minimum((tl.minimum(last, tiles_before + request_tiles) - tiles_before) * BLOCK_N, tokens)
        split = program - tiles_before // run
        latent_offs = tl.arange(0, RANK)
        rope_offs = tl.arange(0, ROPE)
        q_rows = q_ptr + b * stride_q_b + h[:, None] * stride_q_h
        q_latent = _dot_operand(tl.load(q_rows + latent_offs[None, :], mask=h_mask[:, None], other=0.0), INTERPRETED)
        q_rope = _dot_operand(tl.load(q_rows + RANK + rope_offs[None, :], mask=h_mask[:, None], other=0.0), INTERPRETED)

        running_max = tl.full([BLOCK_H], float("-inf"), tl.float32)
        running_sum = tl.zeros([BLOCK_H], tl.float32)
        acc = tl.zeros([BLOCK_H, RANK], tl.float32)
        cache_rows = cache_ptr + b.to(tl.int64) * stride_cache_b
        # kv_loads=descriptors: the tiles through TMA descriptors over this request's `tokens` rows: a tile reaching past
        # them reads zeros (outside the descriptor's shape), never a row past the request's length.
        latent_desc = tl.make_tensor_descriptor(cache_rows, [tokens, RANK + ROPE], [stride_cache_t, 1], [BLOCK_N, RANK])
        rope_desc = tl.make_tensor_descriptor(cache_rows, [tokens, RANK + ROPE], [stride_cache_t, 1], [BLOCK_N, ROPE])
        for t0 in range(start, end, BLOCK_N):
            t = t0 + tl.arange(0, BLOCK_N)
            t_mask = t < end
            kv_latent = latent_desc.load([t0, 0])  # [N, RANK]
            kv_rope = rope_desc.load([t0, RANK])  # [N, ROPE]
            kv_dtype = kv_latent.dtype
            kv_latent = _dot_operand(kv_latent, INTERPRETED)
            logits = tl.dot(q_latent, tl.trans(kv_latent))
            logits = tl.dot(q_rope, tl.trans(_dot_operand(kv_rope, INTERPRETED)), acc=logits)
            logits = tl.where(t_mask[None, :], logits * qk_scale_log2, float("-inf"))
            new_max = tl.maximum(running_max, tl.max(logits, axis=1))
            rescale = tl.exp2(running_max - new_max)
            p = tl.exp2(logits - new_max[:, None])
            running_sum = running_sum * rescale + tl.sum(p, axis=1)
            p_operand = _dot_operand(_round_to(p, kv_dtype, INTERPRETED), INTERPRETED)
            acc = acc * rescale[:, None] + tl.dot(p_operand, kv_latent)
            running_max = new_max

        non_empty = running_sum > 0.0
        partial = acc / tl.where(non_empty, running_sum, 1.0)[:, None]
        lse = tl.where(non_empty, running_max + tl.log2(tl.where(non_empty, running_sum, 1.0)), float("-inf"))
        part_rows = partial_ptr + b * stride_part_b + h[:, None] * stride_part_h + split * stride_part_s
        tl.store(part_rows + latent_offs[None, :], partial, mask=h_mask[:, None])
        tl.store(lse_ptr + b * stride_lse_b + h * stride_lse_h + split, lse, mask=h_mask)
        if tiles_before + request_tiles <= last:
            unused = split + 1 + tl.arange(0, SPLITS_POW2)
            tl.store(lse_ptr + b * stride_lse_b + h[:, None] * stride_lse_h + unused[None, :],
                     tl.full([BLOCK_H, SPLITS_POW2], float("-inf"), tl.float32),
                     mask=h_mask[:, None] & (unused < num_splits)[None, :])
        tiles_before += request_tiles
        b += 1


# ------------------------------------------------------------------------------------------------
# 3 on Hopper: the same split-KV attention on warpgroup MMA, in CUDA C++ (attention_kernel=wgmma; its header in
# tasks/mla_attention/templates/wgmma_attention.cu.j2 says how it works)
# ------------------------------------------------------------------------------------------------
_WGMMA_ATTENTION = cuda.Source(r"""
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
#define BAR_P_READY 3
#define BAR_P_FREE 4
#define BAR_BUF_FREE0 5
#define BAR_BUF_FREE1 6
// chunk c (0..8) of the tile warpgroup 0 reads next has landed: barriers 7..15
#define BAR_CHUNK0 7

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

// The same rows, chunk by chunk: chunk c (columns 64 c .. 64 c + 63 of every row) is one cp.async group, committed
// before the next chunk's loads are issued, so the chunks land (and are waited for) in order.
__device__ __forceinline__ void load_rows_by_chunk(u32 tile, const bf16* base, long long row_stride,
                                                   int valid_rows, int thread) {
#pragma unroll
    for (int c = 0; c < CHUNKS; ++c) {
#pragma unroll
        for (int i = 0; i < (BLOCK_N * 8) / 128; ++i) {
            const int piece = i * 128 + thread;
            const int row = piece / 8;
            const bool valid = row < valid_rows;
            const bf16* src = base + (long long)(valid ? row : 0) * row_stride + c * 64 + (piece % 8) * 8;
            cp_async_16(tile + c * CHUNK_BYTES + swizzled(row, piece % 8), src, valid ? 16 : 0);
        }
        cp_async_commit();
    }
}

// The appended row, row `row` of a tile that load_rows (by_chunk false) or load_rows_by_chunk (true) zero-filled there:
// each 16-byte piece loaded by the thread that zero-filled it, once that thread's zero-fill has landed (its own
// cp.async.wait_group), so the two writes of a piece are ordered without a barrier.
__device__ __forceinline__ void load_appended_row(u32 tile, const bf16* src, int row, bool by_chunk, int thread) {
    for (int in_row = 0; in_row < PIECES_PER_ROW; ++in_row) {
        const int owner = by_chunk ? (row * 8 + (in_row & 7)) % 128 : (row * PIECES_PER_ROW + in_row) % 128;
        if (owner == thread)
            cp_async_16(tile + (in_row >> 3) * CHUNK_BYTES + swizzled(row, in_row & 7), src + in_row * 8, 16);
    }
}

// Until the kernel before this one on the stream has ended and its writes are visible (a programmatic dependent).
__device__ __forceinline__ void grid_dependency_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

// launch_overlap=pdl_all: warpgroup 1's first loads. Kernel 3 is launched as kernel 2's programmatic dependent, so it
// may run while kernels 1 and 2 do. Before the wait: the first two tiles of the split (rows start .. start + 127),
// their rows older than the appended one (row tokens - 1), which are the caller's and written by no kernel of this
// call; the appended row and any past it zero-filled. After it: Q (kernel 2's) and the appended row (kernel 1's;
// kernel 2 ends after kernel 1) where it falls in those two tiles. The caller waits for the last group.
__device__ __forceinline__ void load_first_tiles_around_the_wait(u32 smem, const bf16* q_rows, long long stride_q_h,
                                                                 int heads_left, const bf16* cache_rows,
                                                                 long long stride_cache_t, int start, int tokens,
                                                                 int tiles, int thread) {
    const int older = tokens - 1 - start;  // this split's rows before the appended one
    load_rows(smem + SMEM_KV, cache_rows + (long long)start * stride_cache_t, stride_cache_t, older, thread);
    cp_async_commit();
    if (tiles > 1)
        load_rows_by_chunk(smem + SMEM_KV + TILE_BYTES, cache_rows + (long long)(start + BLOCK_N) * stride_cache_t,
                           stride_cache_t, older - BLOCK_N, thread);
    grid_dependency_wait();
    cp_async_wait<0>();  // this thread's zero-fills have landed: its pieces of the appended row may follow
    load_rows(smem + SMEM_Q, q_rows, stride_q_h, heads_left, thread);
    if (older < min(tiles, 2) * BLOCK_N)
        load_appended_row(smem + SMEM_KV + (older / BLOCK_N) * TILE_BYTES,
                          cache_rows + (long long)(start + older) * stride_cache_t, older % BLOCK_N, older >= BLOCK_N,
                          thread);
    cp_async_commit();
}

// Warpgroup 1: wait for the next tile's chunks in order (nine groups outstanding), each
// announced to warpgroup 0 as it lands.
__device__ __forceinline__ void announce_chunks() {
    cp_async_wait<8>(); fence_async_shared(); bar_arrive(BAR_CHUNK0 + 0);
    cp_async_wait<7>(); fence_async_shared(); bar_arrive(BAR_CHUNK0 + 1);
    cp_async_wait<6>(); fence_async_shared(); bar_arrive(BAR_CHUNK0 + 2);
    cp_async_wait<5>(); fence_async_shared(); bar_arrive(BAR_CHUNK0 + 3);
    cp_async_wait<4>(); fence_async_shared(); bar_arrive(BAR_CHUNK0 + 4);
    cp_async_wait<3>(); fence_async_shared(); bar_arrive(BAR_CHUNK0 + 5);
    cp_async_wait<2>(); fence_async_shared(); bar_arrive(BAR_CHUNK0 + 6);
    cp_async_wait<1>(); fence_async_shared(); bar_arrive(BAR_CHUNK0 + 7);
    cp_async_wait<0>(); fence_async_shared(); bar_arrive(BAR_CHUNK0 + 8);
}

__device__ __forceinline__ void wgmma_m64n64k16_ss(float* d, u64 desc_a, u64 desc_b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

__device__ __forceinline__ void wgmma_m64n256k16_rs(float* d, u32 a0, u32 a1, u32 a2, u32 a3,
                                                    u64 desc_b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
        "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
        "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
        "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "
        "{%128, %129, %130, %131}, %132, p, 1, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
          "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
          "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
          "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
          "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
          "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
          "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
          "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
          "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc_b), "r"(1));
}

__device__ __forceinline__ void wgmma_m64n256k16_ss(float* d, u64 desc_a, u64 desc_b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
        "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
        "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
        "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, p, 1, 1, 0, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
          "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
          "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
          "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
          "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
          "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
          "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
          "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
          "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
        : "l"(desc_a), "l"(desc_b), "r"(1));
}
__device__ __forceinline__ void fence_operands_32(float* d) {
#pragma unroll
    for (int i = 0; i < 32; ++i) asm volatile("" : "+f"(d[i]) :: "memory");
}
__device__ __forceinline__ void fence_operands_128(float* d) {
#pragma unroll
    for (int i = 0; i < 128; ++i) asm volatile("" : "+f"(d[i]) :: "memory");
}

extern "C" __global__ void __launch_bounds__(256, 1) mla_wgmma_attention_kernel(
    const bf16* __restrict__ q, const bf16* __restrict__ cache, const int* __restrict__ cache_lens,
    float* __restrict__ partial, float* __restrict__ lse, bf16* __restrict__ o_latent,
    int heads, int num_splits, int split_tiles,
    long long stride_q_b, long long stride_q_h, long long stride_cache_b, long long stride_cache_t,
    long long stride_part_b, long long stride_part_h, long long stride_part_s,
    long long stride_lse_b, long long stride_lse_h, long long stride_o_b, long long stride_o_h, float qk_scale_log2)
{
    extern __shared__ u8 smem_raw[];
    const int head0 = blockIdx.x * BLOCK_H;
    const int split = blockIdx.y;
    const int b = blockIdx.z;
    const int tokens = cache_lens[b] + 1;  // the appended row is attended to
    const int start = split * split_tiles * BLOCK_N;
    const int end = min(start + split_tiles * BLOCK_N, tokens);
    float* lse_row = lse + b * stride_lse_b + split;
    // launch_overlap=pdl: the merge (or the un-absorption) may launch now; its programs wait for this grid to end
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    if (start >= end) {  // a split past the request's tokens: lse -inf, no partial
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
        // launch_overlap=pdl_all: the first two tiles' older rows now, Q and the appended row once kernel 2 has ended
        load_first_tiles_around_the_wait(smem, q + b * stride_q_b + head0 * stride_q_h, stride_q_h, heads - head0,
                                         cache_rows, stride_cache_t, start, tokens, tiles, thread);
        cp_async_wait<0>();  // Q, and the first two tiles whole
        fence_async_shared();
#pragma unroll
        for (int c = 0; c < CHUNKS; ++c) bar_arrive(BAR_CHUNK0 + c);  // the first tile, whole
        for (int j = 0; j < tiles; ++j) {
            const int k = j & 1;
            const u32 kv = smem + SMEM_KV + k * TILE_BYTES;
            bar_sync(BAR_P_READY);
            const float r0 = s_scale[row0], r1 = s_scale[row1];
#pragma unroll
            for (int i = 0; i < 32; ++i) {
                o[4 * i] *= r0; o[4 * i + 1] *= r0; o[4 * i + 2] *= r1; o[4 * i + 3] *= r1;
            }
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < 4; ++kk)
                wgmma_m64n256k16_ss(o, smem_desc(smem + SMEM_P + kk * 32, 16, 1024),
                                    smem_desc(kv + 4 * CHUNK_BYTES + kk * 2048, CHUNK_BYTES, 1024));
            wgmma_commit();
            if (j + 1 < tiles) announce_chunks();  // the next tile's, as they land
            wgmma_wait<0>();
            fence_operands_128(o);
            if (j + 1 < tiles) bar_arrive(BAR_P_FREE);
            if (j + 2 < tiles) {
                bar_sync(k ? BAR_BUF_FREE1 : BAR_BUF_FREE0);
                const int t0 = start + (j + 2) * BLOCK_N;
                load_rows_by_chunk(kv, cache_rows + (long long)t0 * stride_cache_t, stride_cache_t, tokens - t0,
                                   thread);
            }
        }
    } else {
        // ---- S = Q K^T, softmax, P, O[:, 0:256] ----
        float m0 = NEG_INF, m1 = NEG_INF, l0 = 0.0f, l1 = 0.0f;
        for (int j = 0; j < tiles; ++j) {
            const int k = j & 1;
            const u32 kv = smem + SMEM_KV + k * TILE_BYTES;
            const int t0 = start + j * BLOCK_N;
            float s[32];
            wgmma_fence();
#pragma unroll
            for (int c = 0; c < CHUNKS; ++c) {
                bar_sync(BAR_CHUNK0 + c);  // chunk c of this tile has landed
#pragma unroll
                for (int kk = 0; kk < 4; ++kk)
                    wgmma_m64n64k16_ss(s, smem_desc(smem + SMEM_Q + c * CHUNK_BYTES + kk * 32, 16, 1024),
                                       smem_desc(kv + c * CHUNK_BYTES + kk * 32, 16, 1024), (c | kk) != 0);
            }
            wgmma_commit();
            wgmma_wait<0>();
            fence_operands_32(s);
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
                wgmma_m64n256k16_rs(o, p[4 * kk], p[4 * kk + 1], p[4 * kk + 2], p[4 * kk + 3],
                                    smem_desc(kv + kk * 2048, CHUNK_BYTES, 1024));
            wgmma_commit();
            wgmma_wait<0>();
            fence_operands_128(o);
            if (j + 2 < tiles) bar_arrive(k ? BAR_BUF_FREE1 : BAR_BUF_FREE0);
        }
        l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
        l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
        l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
        l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
        if (quad == 0) { s_sum[row0] = l0; s_sum[row1] = l1; s_max[row0] = m0; s_max[row1] = m1; }
    }
    __syncthreads();
    // ---- the normalized partial of this split (or, with o_latent, the one split's output in bf16), its lse ----
    const float l0 = s_sum[row0], l1 = s_sum[row1];
    const int column0 = warpgroup * 256 + 2 * quad;
    const int rows[2] = {row0, row1};
    const float sums[2] = {l0, l1};
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int head = head0 + rows[r];
        if (head >= heads) continue;
        // one division a row, then products: 128 IEEE divisions a thread (about 27 instructions each) were half the
        // kernel's machine code, fetched cold by every CTA where each walks few tiles (B=1: 2 tiles a CTA)
        const float inv_l = 1.0f / sums[r];
        if (o_latent != nullptr) {
            bf16* out = o_latent + b * stride_o_b + head * stride_o_h + column0;
#pragma unroll
            for (int i = 0; i < 32; ++i)
                *reinterpret_cast<__nv_bfloat162*>(out + 8 * i) =
                    __floats2bfloat162_rn(o[4 * i + 2 * r] * inv_l, o[4 * i + 2 * r + 1] * inv_l);
        } else {
            float* out = partial + b * stride_part_b + head * stride_part_h + split * stride_part_s + column0;
#pragma unroll
            for (int i = 0; i < 32; ++i)
                *reinterpret_cast<float2*>(out + 8 * i) = make_float2(o[4 * i + 2 * r] * inv_l, o[4 * i + 2 * r + 1] * inv_l);
        }
        if (warpgroup == 0 && quad == 0) lse_row[head * stride_lse_h] = s_max[rows[r]] + log2f(sums[r]);
    }
}
""")


# ------------------------------------------------------------------------------------------------
# 4. merge splits -> o_latent, un-absorb per head -> o_heads
# ------------------------------------------------------------------------------------------------
@triton.jit
def _split_weights_normalizer(lse_ptr, rows, row_mask, h, num_splits, stride_lse_b, stride_lse_h,
                              SPLITS_POW2: tl.constexpr):
    """Per row of lse[rows, h, :]: the largest split log-sum-exp (base 2) and the sum of exp2(lse_s - max)."""
    split_offs = tl.arange(0, SPLITS_POW2)
    lse = tl.load(lse_ptr + rows[:, None] * stride_lse_b + h * stride_lse_h + split_offs[None, :],
                  mask=row_mask[:, None] & (split_offs[None, :] < num_splits), other=float("-inf"))
    lse_max = tl.max(lse, axis=1)
    lse_max = tl.where(lse_max == float("-inf"), 0.0, lse_max)  # padding rows of the block
    total = tl.sum(tl.exp2(lse - lse_max[:, None]), axis=1)
    return lse_max, tl.where(total > 0.0, total, 1.0)


@triton.jit
def _start_dependents_then_wait():
    """The next kernel may launch now (its programs wait for this one); then wait for the kernel before this one."""
    tl.extra.cuda.gdc_launch_dependents()
    tl.extra.cuda.gdc_wait()


@triton.jit
def _w_uv_slice(w_kv_b_ptr, h, v_offs, heads, stride_w_row, dtype: tl.constexpr, RANK: tl.constexpr,
                NOPE: tl.constexpr, V_DIM: tl.constexpr, BLOCK_V: tl.constexpr, PER_HEAD_UV: tl.constexpr,
                INTERPRETED: tl.constexpr):
    """W_UV_h^T [RANK, BLOCK_V] (rows h*(NOPE+V)+NOPE+v of kv_b_proj, columns r); with PER_HEAD_UV off, the heads'
    mean rounded to dtype (o_latent's), as _unabsorb_kernel's K loop makes it."""
    r = tl.arange(0, RANK)
    if PER_HEAD_UV:
        w_uv = tl.load(w_kv_b_ptr + (h * (NOPE + V_DIM) + NOPE + v_offs)[None, :] * stride_w_row + r[:, None])
    else:
        shared = tl.zeros([RANK, BLOCK_V], tl.float32)
        for hh in range(heads):
            shared += tl.load(w_kv_b_ptr + (hh * (NOPE + V_DIM) + NOPE + v_offs)[None, :] * stride_w_row
                              + r[:, None]).to(tl.float32)
        w_uv = _round_to(shared / heads, dtype, INTERPRETED)
    return w_uv


@triton.jit(do_not_specialize=["rows_total", "heads", "num_splits", "stride_lse_b", "stride_lse_h"])
def _merge_splits_kernel(
    partial_ptr, lse_ptr, latent_ptr, rows_total, heads, num_splits,
    stride_part_b, stride_part_h, stride_part_s, stride_lse_b, stride_lse_h,
    RANK: tl.constexpr, BLOCK_ROWS: tl.constexpr, SPLIT_CHUNK: tl.constexpr, SPLITS_POW2: tl.constexpr,
    INTERPRETED: tl.constexpr,
    GDC: tl.constexpr,
):
    """o_latent rows [BLOCK_ROWS rows (b * heads + h) of program 0, all RANK columns], rounded to o_latent's dtype:
    each split's normalized partial weighted by its share of the merged log-sum-exp (base 2), accumulated in fp32
    over each row's split slots up to its last filled one (the filled slots are a prefix of every row's: splits past
    a request's tokens or runs hold lse -inf and no partial, and are never loaded). SPLIT_CHUNK splits of every row
    are loaded at once ([rows, splits, RANK], BLOCK_ROWS x SPLIT_CHUNK rows of partials in flight), their mask from
    one load of the rows' log-sum-exps before the loop, so no load waits on another; a slot of weight 0 adds an exact
    0 whatever its partial holds. Many rows per program at large B x H keep the programs few; few rows and more
    splits at once at small B x H keep the loads many."""
    if GDC:
        _start_dependents_then_wait()
    rows = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    row_mask = rows < rows_total
    b = rows // heads
    h = rows % heads
    r = tl.arange(0, RANK)
    split_offs = tl.arange(0, SPLITS_POW2)
    lse_rows = lse_ptr + b * stride_lse_b + h * stride_lse_h
    lse = tl.load(lse_rows[:, None] + split_offs[None, :],
                  mask=row_mask[:, None] & (split_offs[None, :] < num_splits), other=float("-inf"))
    lse_max = tl.max(lse, axis=1)
    lse_max = tl.where(lse_max == float("-inf"), 0.0, lse_max)
    total = tl.sum(tl.exp2(lse - lse_max[:, None]), axis=1)
    total = tl.where(total > 0.0, total, 1.0)
    filled_rows = tl.max(tl.where(lse != float("-inf"), split_offs[None, :] + 1, 0), axis=1)
    part_rows = partial_ptr + b[:, None, None] * stride_part_b + h[:, None, None] * stride_part_h + r[None, None, :]
    latent = tl.zeros([BLOCK_ROWS, RANK], tl.float32)
    for s0 in range(0, tl.max(filled_rows, axis=0), SPLIT_CHUNK):
        s = s0 + tl.arange(0, SPLIT_CHUNK)
        filled = s[None, :] < filled_rows[:, None]  # [rows, splits]
        lse_s = tl.load(lse_rows[:, None] + s[None, :], mask=filled, other=float("-inf"))
        part = tl.load(part_rows + s[None, :, None] * stride_part_s, mask=filled[:, :, None], other=0.0)
        weight = tl.exp2(lse_s - lse_max[:, None]) / total[:, None]
        latent += tl.sum(tl.where((weight > 0.0)[:, :, None], weight[:, :, None] * part, 0.0), axis=1)
    tl.store(latent_ptr + rows[:, None] * RANK + r[None, :], _round_to(latent, latent_ptr.dtype.element_ty, INTERPRETED),
             mask=row_mask[:, None])


@triton.jit(do_not_specialize=["heads", "num_splits", "stride_lse_b", "stride_lse_h"])
def _merge_row_kernel(
    partial_ptr, lse_ptr, latent_ptr, heads, num_splits,
    stride_part_b, stride_part_h, stride_part_s, stride_lse_b, stride_lse_h,
    RANK: tl.constexpr, SPLIT_CHUNK: tl.constexpr, SPLITS_POW2: tl.constexpr, INTERPRETED: tl.constexpr,
    GDC: tl.constexpr,
):
    """_merge_splits_kernel's sum for one (request, head) row per program (row b * heads + h), where there are few
    rows: SPLIT_CHUNK splits at a time as one [splits, RANK] load, so the sum over the splits stays within each
    thread (the 3-D [rows, splits, RANK] chunks of _merge_splits_kernel spill at one row and 16 splits). Same
    weights, same masks, the splits in the same order."""
    if GDC:
        _start_dependents_then_wait()
    row = tl.program_id(0)
    b = row // heads
    h = row % heads
    r = tl.arange(0, RANK)
    split_offs = tl.arange(0, SPLITS_POW2)
    lse_row = lse_ptr + b * stride_lse_b + h * stride_lse_h
    lse = tl.load(lse_row + split_offs, mask=split_offs < num_splits, other=float("-inf"))
    lse_max = tl.max(lse, axis=0)
    lse_max = tl.where(lse_max == float("-inf"), 0.0, lse_max)
    total = tl.sum(tl.exp2(lse - lse_max), axis=0)
    total = tl.where(total > 0.0, total, 1.0)
    filled = tl.max(tl.where(lse != float("-inf"), split_offs + 1, 0), axis=0)
    part_row = partial_ptr + b * stride_part_b + h * stride_part_h
    latent = tl.zeros([RANK], tl.float32)
    for s0 in range(0, filled, SPLIT_CHUNK):
        s = s0 + tl.arange(0, SPLIT_CHUNK)
        live = s < filled
        lse_s = tl.load(lse_row + s, mask=live, other=float("-inf"))
        part = tl.load(part_row + s[:, None] * stride_part_s + r[None, :], mask=live[:, None], other=0.0)
        weight = tl.exp2(lse_s - lse_max) / total
        latent += tl.sum(tl.where((weight > 0.0)[:, None], weight[:, None] * part, 0.0), axis=0)
    tl.store(latent_ptr + row * RANK + r, _round_to(latent, latent_ptr.dtype.element_ty, INTERPRETED))


@triton.jit(do_not_specialize=["batch", "heads"])
def _unabsorb_kernel(
    latent_ptr, w_kv_b_ptr, out_ptr,
    batch, heads,
    stride_w_row, stride_out_b, stride_out_h,
    RANK: tl.constexpr, NOPE: tl.constexpr, V_DIM: tl.constexpr, BLOCK_B: tl.constexpr, BLOCK_V: tl.constexpr,
    BLOCK_R: tl.constexpr, PER_HEAD_UV: tl.constexpr, INTERPRETED: tl.constexpr,
    GDC: tl.constexpr,
):
    """o_heads[rows, h, v] = o_latent[rows, h, :] @ W_UV_h^T[:, v] for program (h, batch block, value block):
    a [BLOCK_B, RANK] x [RANK, BLOCK_V] GEMM in fp32, W_UV_h's slice loaded whole before the wait for the kernel
    that wrote o_latent (launch_overlap=pdl: it is read while that kernel runs)."""
    h = tl.program_id(0)
    rows = tl.program_id(1) * BLOCK_B + tl.arange(0, BLOCK_B)
    row_mask = rows < batch
    v_offs = tl.program_id(2) * BLOCK_V + tl.arange(0, BLOCK_V)
    latent_rows = latent_ptr + (rows[:, None] * heads + h) * RANK
    w_uv = _w_uv_slice(w_kv_b_ptr, h, v_offs, heads, stride_w_row, latent_ptr.dtype.element_ty, RANK, NOPE, V_DIM,
                       BLOCK_V, PER_HEAD_UV, INTERPRETED)
    if GDC:
        tl.extra.cuda.gdc_wait()
    latent = tl.load(latent_rows + tl.arange(0, RANK)[None, :], mask=row_mask[:, None], other=0.0)
    out = tl.dot(_dot_operand(latent, INTERPRETED), _dot_operand(w_uv, INTERPRETED))
    tl.store(out_ptr + rows[:, None] * stride_out_b + h * stride_out_h + v_offs[None, :],
             _round_to(out, out_ptr.dtype.element_ty, INTERPRETED), mask=row_mask[:, None])


# ------------------------------------------------------------------------------------------------
# trace only
# ------------------------------------------------------------------------------------------------
@triton.jit
def _trace_appended_rows_kernel(cache_ptr, cache_lens_ptr, c_kv_ptr, k_pe_ptr, stride_cache_b, stride_cache_t,
                                RANK: tl.constexpr, ROPE: tl.constexpr):
    """Reads back what kernel 1 wrote: row cache_lens[b] of request b."""
    b = tl.program_id(0).to(tl.int64)
    row = cache_ptr + b * stride_cache_b + tl.load(cache_lens_ptr + b).to(tl.int64) * stride_cache_t
    latent_offs = tl.arange(0, RANK)
    rope_offs = tl.arange(0, ROPE)
    tl.store(c_kv_ptr + b * RANK + latent_offs, tl.load(row + latent_offs))
    tl.store(k_pe_ptr + b * ROPE + rope_offs, tl.load(row + RANK + rope_offs))


@triton.jit(do_not_specialize=["heads", "capacity", "num_splits", "stride_lse_b", "stride_lse_h"])
def _trace_scores_probs_kernel(
    q_ptr, cache_ptr, cache_lens_ptr, lse_ptr, scores_ptr, probs_ptr,
    heads, capacity, num_splits,
    stride_q_b, stride_q_h, stride_cache_b, stride_cache_t, stride_lse_b, stride_lse_h,
    qk_scale, qk_scale_log2,
    RANK: tl.constexpr, ROPE: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr,
    SPLITS_POW2: tl.constexpr, INTERPRETED: tl.constexpr,
):
    head_block = tl.program_id(0)
    t = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    b = tl.program_id(2)
    tokens = tl.load(cache_lens_ptr + b) + 1
    h = head_block * BLOCK_H + tl.arange(0, BLOCK_H)
    h_mask = h < heads
    latent_offs = tl.arange(0, RANK)
    rope_offs = tl.arange(0, ROPE)
    q_rows = q_ptr + b * stride_q_b + h[:, None] * stride_q_h
    q_latent = _dot_operand(tl.load(q_rows + latent_offs[None, :], mask=h_mask[:, None], other=0.0), INTERPRETED)
    q_rope = _dot_operand(tl.load(q_rows + RANK + rope_offs[None, :], mask=h_mask[:, None], other=0.0), INTERPRETED)
    visible = t < tokens
    tile_rows = cache_ptr + b.to(tl.int64) * stride_cache_b + t[:, None].to(tl.int64) * stride_cache_t
    kv_latent = tl.load(tile_rows + latent_offs[None, :], mask=visible[:, None], other=0.0)
    kv_rope = tl.load(tile_rows + RANK + rope_offs[None, :], mask=visible[:, None], other=0.0)
    kv_latent = _dot_operand(kv_latent, INTERPRETED)
    kv_rope = _dot_operand(kv_rope, INTERPRETED)
    logits = tl.dot(q_latent, tl.trans(kv_latent))
    logits = tl.dot(q_rope, tl.trans(kv_rope), acc=logits)
    scores = tl.where(visible[None, :], logits * qk_scale, float("-inf"))

    # The fast path's own normalizer: log-sum-exp (base 2) of lse[b, h, :] merged over its splits
    # (the helper walks rows of heads here, hence the swapped strides).
    lse_max, total = _split_weights_normalizer(lse_ptr, h, h_mask, b, num_splits, stride_lse_h, stride_lse_b,
                                               SPLITS_POW2)
    lse_total = lse_max + tl.log2(total)
    probs = tl.where(visible[None, :], tl.exp2(logits * qk_scale_log2 - lse_total[:, None]), 0.0)

    out_offs = b * heads * capacity + h[:, None] * capacity + t[None, :]
    out_mask = h_mask[:, None] & (t[None, :] < capacity)
    tl.store(scores_ptr + out_offs, scores, mask=out_mask)
    tl.store(probs_ptr + out_offs, probs, mask=out_mask)


# ------------------------------------------------------------------------------------------------
# host side
# ------------------------------------------------------------------------------------------------
_inv_freq_by_device: dict[tuple, torch.Tensor] = {}
_sm_count_by_device: dict[str, int] = {}
_config_by_shape: dict[tuple, dict] = {}


def _inv_freq(params: dict, device: torch.device) -> torch.Tensor:
    key = (str(device), _USE_YARN, params["rope_theta"], params["qk_rope_head_dim"], repr(params.get("rope_scaling")))
    if key not in _inv_freq_by_device:
        _inv_freq_by_device[key] = torch.tensor(_rope_inv_freq_values(params), dtype=torch.float32, device=device)
    return _inv_freq_by_device[key]


_programmatic_by_device: dict[str, bool] = {}


def _programmatic_launches(device: torch.device) -> bool:
    """launch_overlap=pdl: whether kernels 2 and 4 start as programmatic dependents (a GPU of compute capability 9.0
    or more; never under the interpreter, which has no griddepcontrol). Keyed on the device alone."""
    if device.type != "cuda":
        return False
    key = str(device)
    if key not in _programmatic_by_device:
        _programmatic_by_device[key] = torch.cuda.get_device_capability(device)[0] >= 9
    return _programmatic_by_device[key]


def _parallel_slots(device: torch.device) -> int:
    """Programs that fill the machine: PROGRAMS_PER_SM per SM on a GPU, a handful under the CPU interpreter."""
    if device.type != "cuda":
        return 8
    key = str(device)
    if key not in _sm_count_by_device:
        _sm_count_by_device[key] = torch.cuda.get_device_properties(device).multi_processor_count
    return PROGRAMS_PER_SM * _sm_count_by_device[key]


def _wave_filling_splits(programs_per_split: int, tiles: int, most: int, slots: int) -> int:
    """The split count (1..most) with the least modelled time: the waves of `slots` resident programs
    that B * head blocks * splits programs take, times each program's tiles of the longest request plus two
    tiles' worth of prologue and epilogue (the q load, the partial store). Ties go to fewer splits (a
    cheaper merge)."""
    def cost(splits: int) -> int:
        waves = triton.cdiv(programs_per_split * splits, slots)
        return waves * (triton.cdiv(tiles, splits) + 2)

    return min(range(1, most + 1), key=lambda splits: (cost(splits), splits))


def _attention_config(batch: int, heads: int, capacity: int, device: torch.device) -> dict:
    """Kernel 3's sizing for this shape, worked out once per shape (a dict keyed on sizes, never on values): the
    waves policy's search over split counts is a Python loop, tens of microseconds a step at small batch."""
    key = (batch, heads, capacity, str(device))
    if key not in _config_by_shape:
        _config_by_shape[key] = _attention_config_of(batch, heads, capacity, device)
    return _config_by_shape[key]


def _attention_config_of(batch: int, heads: int, capacity: int, device: torch.device) -> dict:
    """Block sizes and split count of kernel 3, from the template point (module constants above)."""
    return _balanced_config(_head_block_rows(heads), heads, capacity, device)


def _head_block_rows(heads: int) -> int:
    """Rows of one head block: the heads, padded up to a power of two, capped by HEAD_BLOCK."""
    # tl.dot needs at least 16 rows: fewer heads than 16 are padded up to a block of 16.
    block_h = min(HEAD_BLOCK, max(16, triton.next_power_of_2(heads)))
    return block_h


def _balanced_config(block_h: int, heads: int, capacity: int, device: torch.device) -> dict:
    """split_chunk=balanced: `programs` runs per head block (PROGRAMS_PER_SM per SM shared by the head blocks; 8
    programs' worth under the interpreter), each run at least min_tiles tiles. A request meets at most
    cdiv(its tiles - 1, run) + 1 runs, so the split slots it needs are bounded by its capacity's tiles; min_tiles
    also keeps them to 64 at most."""
    block_n = TOKEN_BLOCK
    capacity_tiles = triton.cdiv(capacity, block_n)
    # under the interpreter every tile may start a run, so that small caches still cross requests and get merged
    min_tokens_per_split = MIN_TOKENS_PER_SPLIT if device.type == "cuda" else block_n
    min_tiles = max(triton.cdiv(min_tokens_per_split, block_n), triton.cdiv(capacity_tiles, 63))
    programs = max(1, _parallel_slots(device) // triton.cdiv(heads, block_h))
    splits = max(1, min(programs, triton.cdiv(capacity_tiles - 1, min_tiles) + 1))
    return {"BLOCK_H": block_h, "BLOCK_N": block_n, "num_warps": NUM_WARPS, "num_stages": NUM_STAGES,
            "num_splits": splits, "programs": programs, "min_tiles": min_tiles}


def _batch_block(batch: int, interpreted: bool) -> int:
    if not interpreted:
        # two block sizes whatever the batch, so two compilations at most (padding rows are masked): a block of
        # 64 rows at 8 requests made the H200's step 10% slower (kernel 4's merge works on every row it holds)
        return 16 if batch <= 16 else 64
    # the interpreter compiles nothing, and its time grows with the block: the fewest rows that hold the batch
    return min(64, max(16, triton.next_power_of_2(batch)))


def _unabsorb_blocks(batch: int, heads: int, device: torch.device) -> tuple[int, int]:
    """Rows and value columns of one un-absorption program: all rows of a head up to 64, the 128 value columns
    halved (to 64, then 32) while heads x batch blocks x value blocks leave SMs without a program."""
    block_b = min(64, max(16, triton.next_power_of_2(batch)))
    # SMs of the GPU; 2 under the interpreter (its time grows with the programs), so that the one-head cases still
    # split their value columns
    sms = _parallel_slots(device) // PROGRAMS_PER_SM if device.type == "cuda" else 2
    block_v = V_HEAD_DIM
    while block_v > 32 and heads * triton.cdiv(batch, block_b) * (V_HEAD_DIM // block_v) < sms:
        block_v //= 2
    return block_b, block_v


# Partial rows ([RANK] fp32 each) one merge program loads at once: rows x splits at a time (64 registers a thread at
# 4 warps)
MERGE_PARTIALS = 16
# Where a merge program gets one row (_merge_rows returns 1: B x H up to about 4 programs per SM), _merge_row_kernel
# merges it, 8 splits at a time. On the H200 (each kernel's
# device time, L2 flushed), against _merge_splits_kernel at one row: full_h128 B=8 4.5 against 18.5 us, tp1_b8 5.1
# against 18.4, B=1 3.0 against 4.0; 16 splits at a time 5.9, 6.0 and 2.8. At 16 rows a program (full_h128 B=64) the
# row kernel took 20.4 us against 14.1, so rows in blocks stay with _merge_splits_kernel.
ROW_MERGE_SPLITS = 8


def _merge_rows(rows: int, device: torch.device) -> int:
    """(request, head) rows per merge program: the most (up to MERGE_PARTIALS) that still leave 4 programs per SM
    (2 programs under the interpreter, so that a block holds several rows there too); the rest of MERGE_PARTIALS
    goes to splits loaded at once."""
    programs = 4 * _parallel_slots(device) // PROGRAMS_PER_SM if device.type == "cuda" else 2
    block_rows = MERGE_PARTIALS
    while block_rows > 1 and triton.cdiv(rows, block_rows) < programs:
        block_rows //= 2
    return block_rows


def _merge_and_unabsorb(partial, lse, w_kv_b, o_heads, splits_pow2: int, interpreted: bool,
                        merged: torch.Tensor | None = None) -> torch.Tensor:
    """Kernel 4 as two launches: the splits merged into o_latent [B, H, RANK] (o_heads' dtype, as kernel 4 of
    side_kernels=batch_blocks rounds it), then un-absorbed per head as a GEMM over the batch. Returns o_latent.
    merged: o_latent as kernel 3 wrote it (one split), so there is nothing to merge."""
    batch, heads, num_splits, rank = partial.shape
    o_latent = torch.empty((batch, heads, rank), dtype=o_heads.dtype, device=partial.device) if merged is None \
        else merged
    block_rows = _merge_rows(batch * heads, partial.device)
    gdc = _programmatic_launches(partial.device)
    if merged is None and block_rows == 1:
        _merge_row_kernel[(batch * heads,)](
            partial, lse, o_latent, heads, num_splits,
            partial.stride(0), partial.stride(1), partial.stride(2), lse.stride(0), lse.stride(1),
            RANK=rank, SPLIT_CHUNK=ROW_MERGE_SPLITS, SPLITS_POW2=splits_pow2, INTERPRETED=interpreted, num_warps=4,
            GDC=gdc, launch_pdl=gdc,
        )
    elif merged is None:
        _merge_splits_kernel[(triton.cdiv(batch * heads, block_rows),)](
            partial, lse, o_latent, batch * heads, heads, num_splits,
            partial.stride(0), partial.stride(1), partial.stride(2), lse.stride(0), lse.stride(1),
            RANK=rank, BLOCK_ROWS=block_rows, SPLIT_CHUNK=MERGE_PARTIALS // block_rows, SPLITS_POW2=splits_pow2,
            INTERPRETED=interpreted, num_warps=4,
            GDC=gdc, launch_pdl=gdc,
        )
    block_b, block_v = _unabsorb_blocks(batch, heads, partial.device)
    _unabsorb_kernel[(heads, triton.cdiv(batch, block_b), V_HEAD_DIM // block_v)](
        o_latent, w_kv_b, o_heads, batch, heads, w_kv_b.stride(0), o_heads.stride(0), o_heads.stride(1),
        RANK=rank, NOPE=QK_NOPE_HEAD_DIM, V_DIM=V_HEAD_DIM, BLOCK_B=block_b, BLOCK_V=block_v, BLOCK_R=64,
        # W_UV_h's whole [RANK, BLOCK_V] slice is loaded at once (before the wait): 8 warps hold it
        PER_HEAD_UV=_PER_HEAD_UV, INTERPRETED=interpreted, GDC=gdc, launch_pdl=gdc, num_warps=8,
    )
    return o_latent


def _descriptor_scratch(size: int, alignment: int, stream) -> torch.Tensor:
    """Global memory for the tensor descriptors kernel 3 builds on the device (128 bytes per program)."""
    return torch.empty(size, dtype=torch.int8, device="cuda")


def _wgmma_config(batch: int, heads: int, capacity: int, device: torch.device) -> dict | None:
    """Kernel 3 on warpgroup MMA for this shape, or None for Triton's (no Hopper GPU, or WGMMA_MIN_HEADS heads or
    fewer); worked out once per shape, keyed on sizes and the device alone."""
    key = ("wgmma", batch, heads, capacity, str(device))
    if key not in _config_by_shape:
        _config_by_shape[key] = _wgmma_config_of(batch, heads, capacity, device)
    return _config_by_shape[key]


def _wgmma_config_of(batch: int, heads: int, capacity: int, device: torch.device) -> dict | None:
    if device.type != "cuda" or heads <= WGMMA_MIN_HEADS or torch.cuda.get_device_capability(device) != (9, 0):
        return None
    tiles = triton.cdiv(capacity, WGMMA_BLOCK_N)
    most = max(1, min(WGMMA_MAX_SPLITS, tiles // WGMMA_MIN_SPLIT_TILES))
    splits = _wave_filling_splits(triton.cdiv(heads, WGMMA_BLOCK_H) * batch, tiles, most,
                                  _parallel_slots(device) // PROGRAMS_PER_SM)
    split_tiles = triton.cdiv(tiles, splits)
    return {"num_splits": triton.cdiv(tiles, split_tiles), "split_tiles": split_tiles}


def _wgmma_attention(q, kv_cache, cache_lens, partial, lse, split_tiles: int, qk_scale_log2: float,
                     o_latent: torch.Tensor | None = None, programmatic: bool = False) -> None:
    """Kernel 3 on warpgroup MMA: grid (head blocks, splits, requests), 256 threads, one CTA an SM. With o_latent (one
    split, bf16), the split's normalized output is written there, rounded as the merge rounds it, and no partial: the
    merge has nothing to do. Its loads take 16-byte pieces of the cache's rows, which run() checks are aligned.
    programmatic: launched as kernel 2's programmatic dependent, it loads the cache's rows older than the appended one
    before it waits for kernel 2 (which ends after kernel 1), and q and the appended row after."""
    batch, heads, _ = q.shape
    num_splits = lse.shape[2]
    if o_latent is not None:
        assert num_splits == 1 and o_latent.dtype == torch.bfloat16 and o_latent.stride(2) == 1
    _WGMMA_ATTENTION.launch(
        "mla_wgmma_attention_kernel", (triton.cdiv(heads, WGMMA_BLOCK_H), num_splits, batch), (256,),
        (q, kv_cache, cache_lens, partial, lse, cuda.NULL if o_latent is None else o_latent,
         cuda.i32(heads), cuda.i32(num_splits), cuda.i32(split_tiles),
         cuda.i64(q.stride(0)), cuda.i64(q.stride(1)), cuda.i64(kv_cache.stride(0)), cuda.i64(kv_cache.stride(1)),
         cuda.i64(partial.stride(0)), cuda.i64(partial.stride(1)), cuda.i64(partial.stride(2)),
         cuda.i64(lse.stride(0)), cuda.i64(lse.stride(1)),
         cuda.i64(0 if o_latent is None else o_latent.stride(0)), cuda.i64(0 if o_latent is None else o_latent.stride(1)),
         cuda.f32(qk_scale_log2)),
        shared_mem=WGMMA_SHARED_BYTES, programmatic=programmatic,
    )


def _check_params(params: dict) -> None:
    expected = {"kv_lora_rank": KV_LORA_RANK, "qk_nope_head_dim": QK_NOPE_HEAD_DIM,
                "qk_rope_head_dim": QK_ROPE_HEAD_DIM, "v_head_dim": V_HEAD_DIM}
    for name, value in expected.items():
        if params[name] != value:
            raise ValueError(f"kernels are specialized for {name}={value}, got {params[name]}")


def run(inputs: dict[str, torch.Tensor], outputs: dict[str, torch.Tensor], params: dict,
        trace: dict | None = None) -> None:
    _check_params(params)
    q_nope, q_pe, kv_a = inputs["q_nope"], inputs["q_pe"], inputs["kv_a"]
    gamma, w_kv_b = inputs["kv_a_norm_weight"], inputs["w_kv_b"]
    positions, cache_lens, kv_cache = inputs["positions"], inputs["cache_lens"], inputs["kv_cache"]
    o_heads = outputs["o_heads"]
    for name, tensor in (("q_nope", q_nope), ("q_pe", q_pe), ("kv_a", kv_a), ("w_kv_b", w_kv_b),
                         ("kv_cache", kv_cache), ("o_heads", o_heads)):
        if tensor.stride(-1) != 1:
            raise ValueError(f"{name} must be contiguous in its last dimension")
    batch, heads, _ = q_nope.shape
    capacity = kv_cache.shape[1]
    device = kv_cache.device
    rank, rope = KV_LORA_RANK, QK_ROPE_HEAD_DIM
    interpreted = device.type != "cuda"  # Triton's CPU interpreter: see _dot_operand and _round_to

    inv_freq = _inv_freq(params, device)
    magnitude = _rope_magnitude(params)
    scale = _softmax_scale(params)
    config = _attention_config(batch, heads, capacity, device)
    # kernel 3 on warpgroup MMA where it applies (the cache's rows and strides in whole 16-byte pieces for its loads)
    wgmma = _wgmma_config(batch, heads, capacity, device)
    if wgmma is not None and not (cuda.aligned(kv_cache, to=16) and kv_cache.stride(0) % 8 == 0
                                  and kv_cache.stride(1) % 8 == 0 and cache_lens.dtype == torch.int32):
        wgmma = None
    num_splits = wgmma["num_splits"] if wgmma is not None else config["num_splits"]
    # the merge's vector of split log-sum-exps: one size for every shape, except under the interpreter
    splits_pow2 = max(2, triton.next_power_of_2(num_splits)) if interpreted else MAX_SPLITS

    q = torch.empty((batch, heads, rank + rope), dtype=q_nope.dtype, device=device)
    partial = torch.empty((batch, heads, num_splits, rank), dtype=torch.float32, device=device)
    lse = torch.empty((batch, heads, num_splits), dtype=torch.float32, device=device)
    gdc = _programmatic_launches(device)

    _kv_append_kernel[(batch,)](
        kv_a, gamma, inv_freq, positions, cache_lens, kv_cache,
        kv_a.stride(0), kv_cache.stride(0), kv_cache.stride(1),
        params["rms_norm_eps"], magnitude,
        RANK=rank, ROPE=rope, APPLY_NORM=_APPLY_KV_NORM, INTERPRETED=interpreted, num_warps=4,
        GDC=gdc,
    )

    block_b = _batch_block(batch, interpreted)
    # 256 columns and 8 warps a program: kernel 2 alone on the H200 (L2 flushed)
    # took 29.2 us at B=64 H=128 and 11.7 at B=8,
    # against 33.2 and 27.0 with 64 columns and 4 warps; the last program of each row block ropes q_pe
    block_c, q_warps = 256, 8
    _q_prepare_kernel[(heads, triton.cdiv(batch, block_b), rank // block_c + 1)](
        q_nope, q_pe, w_kv_b, inv_freq, positions, q, batch,
        q_nope.stride(0), q_nope.stride(1), q_pe.stride(0), q_pe.stride(1), w_kv_b.stride(0),
        q.stride(0), q.stride(1), magnitude,
        RANK=rank, NOPE=QK_NOPE_HEAD_DIM, ROPE=rope, V_DIM=V_HEAD_DIM, BLOCK_B=block_b, BLOCK_C=block_c,
        INTERPRETED=interpreted, num_warps=q_warps,
        GDC=gdc, launch_pdl=gdc,
    )

    merged = None
    if wgmma is not None:
        if num_splits == 1 and o_heads.dtype == torch.bfloat16:
            # one split: kernel 3 writes o_latent itself (the merge of one split would only round it to bf16)
            merged = torch.empty((batch, heads, rank), dtype=o_heads.dtype, device=device)
        _wgmma_attention(q, kv_cache, cache_lens, partial, lse, wgmma["split_tiles"], scale * _LOG2E,
                         o_latent=merged, programmatic=gdc)
    else:
        block_h = config["BLOCK_H"]
        if not interpreted:
            triton.set_allocator(_descriptor_scratch)  # kernel 3 builds its tensor descriptors in global scratch
        grid = (triton.cdiv(heads, block_h), config["programs"])  # one run of the batch's tiles per program
        _split_kv_attention_kernel[grid](
            q, kv_cache, cache_lens, partial, lse, heads, num_splits, batch, config["programs"], config["min_tiles"],
            q.stride(0), q.stride(1), kv_cache.stride(0), kv_cache.stride(1),
            partial.stride(0), partial.stride(1), partial.stride(2), lse.stride(0), lse.stride(1),
            scale * _LOG2E,
            RANK=rank, ROPE=rope, BLOCK_H=block_h, BLOCK_N=config["BLOCK_N"], INTERPRETED=interpreted,
            LENS_BLOCK=64, SPLITS_POW2=splits_pow2,
            GDC=gdc, launch_pdl=gdc,
            num_warps=config["num_warps"], num_stages=config["num_stages"],
        )

    o_latent = _merge_and_unabsorb(partial, lse, w_kv_b, o_heads, splits_pow2, interpreted, merged)

    if trace is not None:
        _record_trace(trace, q, kv_cache, cache_lens, o_latent, lse, o_heads, scale, splits_pow2, interpreted)


def _record_trace(trace, q, kv_cache, cache_lens, o_latent, lse, o_heads, scale, splits_pow2, interpreted) -> None:
    """Trace-only kernels, launched after the fast path's; they never write what the fast path reads. o_latent is
    the merge's own output (what the un-absorption read)."""
    batch, heads, _ = q.shape
    capacity = kv_cache.shape[1]
    device = q.device
    rank, rope = KV_LORA_RANK, QK_ROPE_HEAD_DIM
    num_splits = lse.shape[2]
    block_h = 16  # trace only: small head blocks keep it free of register spills

    c_kv = torch.empty((batch, rank), dtype=kv_cache.dtype, device=device)
    k_pe = torch.empty((batch, rope), dtype=kv_cache.dtype, device=device)
    _trace_appended_rows_kernel[(batch,)](kv_cache, cache_lens, c_kv, k_pe, kv_cache.stride(0), kv_cache.stride(1),
                                          RANK=rank, ROPE=rope, num_warps=4)

    scores = torch.empty((batch, heads, capacity), dtype=torch.float32, device=device)
    probs = torch.empty_like(scores)
    block_n = 128 if interpreted else 32  # the interpreter's time grows with the programs: fewer, longer tiles there
    _trace_scores_probs_kernel[(triton.cdiv(heads, block_h), triton.cdiv(capacity, block_n), batch)](
        q, kv_cache, cache_lens, lse, scores, probs, heads, capacity, num_splits,
        q.stride(0), q.stride(1), kv_cache.stride(0), kv_cache.stride(1), lse.stride(0), lse.stride(1),
        scale, scale * _LOG2E,
        RANK=rank, ROPE=rope, BLOCK_H=block_h, BLOCK_N=block_n, SPLITS_POW2=splits_pow2,
        INTERPRETED=interpreted, num_warps=4,
    )
    trace.update({
        "c_kv": c_kv,
        "q_pe_roped": q[..., rank:],
        "k_pe_roped": k_pe,
        "kv_cache": kv_cache.clone(),
        "q_absorbed": q[..., :rank],
        "scores": scores,
        "probs": probs,
        "o_latent": o_latent,
        "o_heads": o_heads.clone(),
    })
