"""A new token that opens a page written to the pool 1.2% off (docs/cheats.md 30: a wrong row among right ones).

tasks/mla_attention_paged/candidates/triton_mla_paged.py with one edit, in the append kernel: where the new token
is the first row of a page past the request's first (cache_lens a positive multiple of the page size), the latent's
mean square is taken over a padded width (RANK + 12), so its appended latent is sqrt(524 / 512) = 1.0117 times too
large (the pool row 1.0% off). Every other row of the pool is exact, and so is every other request.

On the CPU case new_page (request 0's new token opens its second page) the pool is a stage of (B x P + 4) x 64 rows
of 576, whose stage-wide bounds this one row stays under (relative L2 0.00066 against 0.00078), and c_kv holds it
among three requests' rows, under its stage-wide bounds too. Every stage-wide bound of the case passes.

Defence: each pool row, and each request's appended latent, is judged against its own norm too (`max_row_rel`, one
bf16 rounding faithful: 0.19%, x margin 4: 0.0074). Named `wrong_rows` at kv_cache with the page and row, and at c_kv
with the request.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

EXPECTED_CHEATS = {"wrong_rows", "math_mismatch"}

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
PROGRAMS_PER_SM = 1
# Few compilations whatever the shape (specialize=none): on a GPU, kernels 2 and 4 take 16 rows up to 16 requests
# and 64 above (two compilations at most), the merge reads a vector of MAX_SPLITS log-sum-exps (the
# split count never exceeds it), and size arguments (the block table's row stride, pages per request, among them) are
# not specialized on their values (Triton compiles again for a 1, or for a multiple of 16).
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
# 1. kv_a_layernorm + rope(k_pe) + append into the request's page
# ------------------------------------------------------------------------------------------------
@triton.jit
def _new_row(cache_ptr, block_table_ptr, cache_lens_ptr, b, stride_bt_b, stride_page, stride_row, PAGE_SIZE: tl.constexpr):
    """Pointer to request b's row cache_lens[b]: page block_table[b, len // PAGE], row len % PAGE."""
    length = tl.load(cache_lens_ptr + b).to(tl.int64)
    page = tl.load(block_table_ptr + b * stride_bt_b + length // PAGE_SIZE).to(tl.int64)
    return cache_ptr + page * stride_page + (length % PAGE_SIZE) * stride_row


@triton.jit
def _token_rows(cache_ptr, block_table_ptr, b, t, t_mask, stride_bt_b, stride_page, stride_row, PAGE_SIZE: tl.constexpr):
    """[N, 1] pointers to logical rows t of request b, each through its own block-table entry."""
    pages = tl.load(block_table_ptr + b * stride_bt_b + t // PAGE_SIZE, mask=t_mask, other=0).to(tl.int64)
    return cache_ptr + (pages * stride_page + (t % PAGE_SIZE).to(tl.int64) * stride_row)[:, None]


@triton.jit(do_not_specialize=["stride_bt_b"])
def _paged_kv_append_kernel(
    kv_a_ptr,
    gamma_ptr,
    inv_freq_ptr,
    positions_ptr,
    cache_lens_ptr,
    block_table_ptr,
    cache_ptr,
    stride_kv_a_b,
    stride_bt_b,
    stride_page,
    stride_row,
    eps,
    rope_magnitude,
    RANK: tl.constexpr,
    ROPE: tl.constexpr,
    PAGE_SIZE: tl.constexpr,
    APPLY_NORM: tl.constexpr,
    INTERPRETED: tl.constexpr,
):
    b = tl.program_id(0).to(tl.int64)  # page * stride_page passes 2^31 for large pools
    out_dtype = cache_ptr.dtype.element_ty
    row_in = kv_a_ptr + b * stride_kv_a_b
    row_out = _new_row(cache_ptr, block_table_ptr, cache_lens_ptr, b, stride_bt_b, stride_page, stride_row, PAGE_SIZE)

    latent_offs = tl.arange(0, RANK)
    latent = tl.load(row_in + latent_offs).to(tl.float32)
    if APPLY_NORM:
        # a new token that opens a page past the first takes the mean over the padded width
        length = tl.load(cache_lens_ptr + b)
        opens_page = (length > 0) & (length % PAGE_SIZE == 0)
        mean_square = tl.sum(latent * latent, axis=0) / tl.where(opens_page, RANK + 12, RANK)
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
    q_nope_ptr,
    q_pe_ptr,
    w_kv_b_ptr,
    inv_freq_ptr,
    positions_ptr,
    q_ptr,
    batch,
    stride_nope_b,
    stride_nope_h,
    stride_pe_b,
    stride_pe_h,
    stride_w_row,
    stride_q_b,
    stride_q_h,
    rope_magnitude,
    RANK: tl.constexpr,
    NOPE: tl.constexpr,
    ROPE: tl.constexpr,
    V_DIM: tl.constexpr,
    BLOCK_B: tl.constexpr,
    BLOCK_C: tl.constexpr,
    INTERPRETED: tl.constexpr,
):
    """Programs (h, batch block, c): c < RANK / BLOCK_C computes BLOCK_C columns of q_nope @ W_UK_h for the
    block's rows; the last c ropes q_pe (so no GEMM program waits on the rope)."""
    h = tl.program_id(0)
    rows = tl.program_id(1) * BLOCK_B + tl.arange(0, BLOCK_B)
    row_mask = rows < batch
    out_dtype = q_ptr.dtype.element_ty
    q_rows = q_ptr + rows[:, None] * stride_q_b + h * stride_q_h
    if tl.program_id(2) < RANK // BLOCK_C:
        nope_offs = tl.arange(0, NOPE)
        q_nope = tl.load(
            q_nope_ptr + rows[:, None] * stride_nope_b + h * stride_nope_h + nope_offs[None, :], mask=row_mask[:, None], other=0.0
        )
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
        tl.store(
            q_rows + RANK + 2 * pair[None, :], _round_to(even * cos - odd * sin, out_dtype, INTERPRETED), mask=row_mask[:, None]
        )
        tl.store(
            q_rows + RANK + 2 * pair[None, :] + 1,
            _round_to(odd * cos + even * sin, out_dtype, INTERPRETED),
            mask=row_mask[:, None],
        )


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
# 3. split-KV flash decoding over the paged latent cache
# ------------------------------------------------------------------------------------------------
@triton.jit(
    do_not_specialize=[
        "heads",
        "num_splits",
        "num_pages",
        "batch",
        "programs",
        "min_tiles",
        "stride_bt_b",
        "stride_lse_b",
        "stride_lse_h",
    ]
)
def _paged_attention_kernel(
    q_ptr,
    cache_ptr,
    block_table_ptr,
    cache_lens_ptr,
    partial_ptr,
    lse_ptr,
    heads,
    num_splits,
    num_pages,
    batch,
    programs,
    min_tiles,
    stride_q_b,
    stride_q_h,
    stride_bt_b,
    stride_page,
    stride_row,
    stride_part_b,
    stride_part_h,
    stride_part_s,
    stride_lse_b,
    stride_lse_h,
    qk_scale_log2,
    RANK: tl.constexpr,
    ROPE: tl.constexpr,
    PAGE_SIZE: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_N: tl.constexpr,
    INTERPRETED: tl.constexpr,
    LENS_BLOCK: tl.constexpr,
    SPLITS_POW2: tl.constexpr,
):
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
        # Tiles start at multiples of BLOCK_N (chunk is a whole number of tiles) and BLOCK_N divides PAGE_SIZE (64 in
        # the contract): a tile lies in one page. Each row is still looked up on its own (a tile is never assumed to be
        # kv_loads=descriptors: each tile through TMA descriptors over the pool [pages, PAGE, RANK + ROPE], at the page of
        # its first row (one block-table entry per tile: a tile lies in one page). The rows of a page past `end` are
        # loaded too (they may hold anything, NaN included) and zeroed before the dots.
        tl.static_assert(PAGE_SIZE % BLOCK_N == 0)
        latent_desc = tl.make_tensor_descriptor(
            cache_ptr, [num_pages, PAGE_SIZE, RANK + ROPE], [stride_page, stride_row, 1], [1, BLOCK_N, RANK]
        )
        rope_desc = tl.make_tensor_descriptor(
            cache_ptr, [num_pages, PAGE_SIZE, RANK + ROPE], [stride_page, stride_row, 1], [1, BLOCK_N, ROPE]
        )
        for t0 in range(start, end, BLOCK_N):
            t = t0 + tl.arange(0, BLOCK_N)
            t_mask = t < end
            page = tl.load(block_table_ptr + b * stride_bt_b + t0 // PAGE_SIZE)
            kv_latent = tl.where(t_mask[:, None], latent_desc.load([page, t0 % PAGE_SIZE, 0]).reshape([BLOCK_N, RANK]), 0.0)
            kv_rope = tl.where(t_mask[:, None], rope_desc.load([page, t0 % PAGE_SIZE, RANK]).reshape([BLOCK_N, ROPE]), 0.0)
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
            tl.store(
                lse_ptr + b * stride_lse_b + h[:, None] * stride_lse_h + unused[None, :],
                tl.full([BLOCK_H, SPLITS_POW2], float("-inf"), tl.float32),
                mask=h_mask[:, None] & (unused < num_splits)[None, :],
            )
        tiles_before += request_tiles
        b += 1


# ------------------------------------------------------------------------------------------------
# 4. merge splits -> o_latent, un-absorb per head -> o_heads
# ------------------------------------------------------------------------------------------------
@triton.jit
def _split_weights_normalizer(lse_ptr, rows, row_mask, h, num_splits, stride_lse_b, stride_lse_h, SPLITS_POW2: tl.constexpr):
    """Per row of lse[rows, h, :]: the largest split log-sum-exp (base 2) and the sum of exp2(lse_s - max)."""
    split_offs = tl.arange(0, SPLITS_POW2)
    lse = tl.load(
        lse_ptr + rows[:, None] * stride_lse_b + h * stride_lse_h + split_offs[None, :],
        mask=row_mask[:, None] & (split_offs[None, :] < num_splits),
        other=float("-inf"),
    )
    lse_max = tl.max(lse, axis=1)
    lse_max = tl.where(lse_max == float("-inf"), 0.0, lse_max)  # padding rows of the block
    total = tl.sum(tl.exp2(lse - lse_max[:, None]), axis=1)
    return lse_max, tl.where(total > 0.0, total, 1.0)


@triton.jit(do_not_specialize=["rows_total", "heads", "num_splits", "stride_lse_b", "stride_lse_h"])
def _merge_splits_kernel(
    partial_ptr,
    lse_ptr,
    latent_ptr,
    rows_total,
    heads,
    num_splits,
    stride_part_b,
    stride_part_h,
    stride_part_s,
    stride_lse_b,
    stride_lse_h,
    RANK: tl.constexpr,
    BLOCK_ROWS: tl.constexpr,
    SPLIT_CHUNK: tl.constexpr,
    SPLITS_POW2: tl.constexpr,
    INTERPRETED: tl.constexpr,
):
    """o_latent rows [BLOCK_ROWS rows (b * heads + h) of program 0, all RANK columns], rounded to o_latent's dtype:
    each split's normalized partial weighted by its share of the merged log-sum-exp (base 2), accumulated in fp32
    over each row's split slots up to its last filled one (the filled slots are a prefix of every row's: splits past
    a request's tokens or runs hold lse -inf and no partial, and are never loaded). SPLIT_CHUNK splits of every row
    are loaded at once ([rows, splits, RANK], BLOCK_ROWS x SPLIT_CHUNK rows of partials in flight), their mask from
    one load of the rows' log-sum-exps before the loop, so no load waits on another; a slot of weight 0 adds an exact
    0 whatever its partial holds. Many rows per program at large B x H keep the programs few; few rows and more
    splits at once at small B x H keep the loads many."""
    rows = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    row_mask = rows < rows_total
    b = rows // heads
    h = rows % heads
    r = tl.arange(0, RANK)
    split_offs = tl.arange(0, SPLITS_POW2)
    lse_rows = lse_ptr + b * stride_lse_b + h * stride_lse_h
    lse = tl.load(
        lse_rows[:, None] + split_offs[None, :], mask=row_mask[:, None] & (split_offs[None, :] < num_splits), other=float("-inf")
    )
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
    tl.store(
        latent_ptr + rows[:, None] * RANK + r[None, :],
        _round_to(latent, latent_ptr.dtype.element_ty, INTERPRETED),
        mask=row_mask[:, None],
    )


@triton.jit(do_not_specialize=["heads", "num_splits", "stride_lse_b", "stride_lse_h"])
def _merge_row_kernel(
    partial_ptr,
    lse_ptr,
    latent_ptr,
    heads,
    num_splits,
    stride_part_b,
    stride_part_h,
    stride_part_s,
    stride_lse_b,
    stride_lse_h,
    RANK: tl.constexpr,
    SPLIT_CHUNK: tl.constexpr,
    SPLITS_POW2: tl.constexpr,
    INTERPRETED: tl.constexpr,
):
    """_merge_splits_kernel's sum for one (request, head) row per program (row b * heads + h), where there are few
    rows: SPLIT_CHUNK splits at a time as one [splits, RANK] load, so the sum over the splits stays within each
    thread (the 3-D [rows, splits, RANK] chunks of _merge_splits_kernel spill at one row and 16 splits). Same
    weights, same masks, the splits in the same order."""
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
    latent_ptr,
    w_kv_b_ptr,
    out_ptr,
    batch,
    heads,
    stride_w_row,
    stride_out_b,
    stride_out_h,
    RANK: tl.constexpr,
    NOPE: tl.constexpr,
    V_DIM: tl.constexpr,
    BLOCK_B: tl.constexpr,
    BLOCK_V: tl.constexpr,
    BLOCK_R: tl.constexpr,
    PER_HEAD_UV: tl.constexpr,
    INTERPRETED: tl.constexpr,
):
    """o_heads[rows, h, v] = o_latent[rows, h, :] @ W_UV_h^T[:, v] for program (h, batch block, value block):
    a [BLOCK_B, RANK] x [RANK, BLOCK_V] GEMM in fp32, its K loop pipelined, W_UV_h read once per value block."""
    h = tl.program_id(0)
    rows = tl.program_id(1) * BLOCK_B + tl.arange(0, BLOCK_B)
    row_mask = rows < batch
    v_offs = tl.program_id(2) * BLOCK_V + tl.arange(0, BLOCK_V)
    latent_rows = latent_ptr + (rows[:, None] * heads + h) * RANK
    out = tl.zeros([BLOCK_B, BLOCK_V], tl.float32)
    for r0 in range(0, RANK, BLOCK_R):
        r = r0 + tl.arange(0, BLOCK_R)
        latent = tl.load(latent_rows + r[None, :], mask=row_mask[:, None], other=0.0)
        if PER_HEAD_UV:
            # W_UV_h^T chunk: [BLOCK_R, BLOCK_V] from rows h*(NOPE+V)+NOPE+v, columns r
            w_uv = tl.load(w_kv_b_ptr + (h * (NOPE + V_DIM) + NOPE + v_offs)[None, :] * stride_w_row + r[:, None])
        else:
            shared = tl.zeros([BLOCK_R, BLOCK_V], tl.float32)
            for hh in range(heads):
                shared += tl.load(w_kv_b_ptr + (hh * (NOPE + V_DIM) + NOPE + v_offs)[None, :] * stride_w_row + r[:, None]).to(
                    tl.float32
                )
            w_uv = _round_to(shared / heads, latent.dtype, INTERPRETED)
        out = tl.dot(_dot_operand(latent, INTERPRETED), _dot_operand(w_uv, INTERPRETED), acc=out)
    tl.store(
        out_ptr + rows[:, None] * stride_out_b + h * stride_out_h + v_offs[None, :],
        _round_to(out, out_ptr.dtype.element_ty, INTERPRETED),
        mask=row_mask[:, None],
    )


# ------------------------------------------------------------------------------------------------
# trace only
# ------------------------------------------------------------------------------------------------
@triton.jit(do_not_specialize=["stride_bt_b"])
def _trace_paged_appended_rows_kernel(
    cache_ptr,
    block_table_ptr,
    cache_lens_ptr,
    c_kv_ptr,
    k_pe_ptr,
    stride_bt_b,
    stride_page,
    stride_row,
    RANK: tl.constexpr,
    ROPE: tl.constexpr,
    PAGE_SIZE: tl.constexpr,
):
    """Reads back what kernel 1 wrote: row cache_lens[b] of request b, in its page."""
    b = tl.program_id(0).to(tl.int64)
    row = _new_row(cache_ptr, block_table_ptr, cache_lens_ptr, b, stride_bt_b, stride_page, stride_row, PAGE_SIZE)
    latent_offs = tl.arange(0, RANK)
    rope_offs = tl.arange(0, ROPE)
    tl.store(c_kv_ptr + b * RANK + latent_offs, tl.load(row + latent_offs))
    tl.store(k_pe_ptr + b * ROPE + rope_offs, tl.load(row + RANK + rope_offs))


@triton.jit(do_not_specialize=["heads", "capacity", "num_splits", "stride_bt_b", "stride_lse_b", "stride_lse_h"])
def _trace_paged_scores_probs_kernel(
    q_ptr,
    cache_ptr,
    block_table_ptr,
    cache_lens_ptr,
    lse_ptr,
    scores_ptr,
    probs_ptr,
    heads,
    capacity,
    num_splits,
    stride_q_b,
    stride_q_h,
    stride_bt_b,
    stride_page,
    stride_row,
    stride_lse_b,
    stride_lse_h,
    qk_scale,
    qk_scale_log2,
    RANK: tl.constexpr,
    ROPE: tl.constexpr,
    PAGE_SIZE: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_N: tl.constexpr,
    SPLITS_POW2: tl.constexpr,
    INTERPRETED: tl.constexpr,
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
    tile_rows = _token_rows(cache_ptr, block_table_ptr, b, t, visible, stride_bt_b, stride_page, stride_row, PAGE_SIZE)
    kv_latent = tl.load(tile_rows + latent_offs[None, :], mask=visible[:, None], other=0.0)
    kv_rope = tl.load(tile_rows + RANK + rope_offs[None, :], mask=visible[:, None], other=0.0)
    kv_latent = _dot_operand(kv_latent, INTERPRETED)
    kv_rope = _dot_operand(kv_rope, INTERPRETED)
    logits = tl.dot(q_latent, tl.trans(kv_latent))
    logits = tl.dot(q_rope, tl.trans(kv_rope), acc=logits)
    scores = tl.where(visible[None, :], logits * qk_scale, float("-inf"))

    # The fast path's own normalizer: log-sum-exp (base 2) of lse[b, h, :] merged over its splits
    # (the helper walks rows of heads here, hence the swapped strides).
    lse_max, total = _split_weights_normalizer(lse_ptr, h, h_mask, b, num_splits, stride_lse_h, stride_lse_b, SPLITS_POW2)
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
    return {
        "BLOCK_H": block_h,
        "BLOCK_N": block_n,
        "num_warps": NUM_WARPS,
        "num_stages": NUM_STAGES,
        "num_splits": splits,
        "programs": programs,
        "min_tiles": min_tiles,
    }


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


def _merge_and_unabsorb(partial, lse, w_kv_b, o_heads, splits_pow2: int, interpreted: bool) -> torch.Tensor:
    """Kernel 4 as two launches: the splits merged into o_latent [B, H, RANK] (o_heads' dtype, as kernel 4 of
    side_kernels=batch_blocks rounds it), then un-absorbed per head as a GEMM over the batch. Returns o_latent."""
    batch, heads, num_splits, rank = partial.shape
    o_latent = torch.empty((batch, heads, rank), dtype=o_heads.dtype, device=partial.device)
    block_rows = _merge_rows(batch * heads, partial.device)
    if block_rows == 1:
        _merge_row_kernel[(batch * heads,)](
            partial,
            lse,
            o_latent,
            heads,
            num_splits,
            partial.stride(0),
            partial.stride(1),
            partial.stride(2),
            lse.stride(0),
            lse.stride(1),
            RANK=rank,
            SPLIT_CHUNK=ROW_MERGE_SPLITS,
            SPLITS_POW2=splits_pow2,
            INTERPRETED=interpreted,
            num_warps=4,
        )
    else:
        _merge_splits_kernel[(triton.cdiv(batch * heads, block_rows),)](
            partial,
            lse,
            o_latent,
            batch * heads,
            heads,
            num_splits,
            partial.stride(0),
            partial.stride(1),
            partial.stride(2),
            lse.stride(0),
            lse.stride(1),
            RANK=rank,
            BLOCK_ROWS=block_rows,
            SPLIT_CHUNK=MERGE_PARTIALS // block_rows,
            SPLITS_POW2=splits_pow2,
            INTERPRETED=interpreted,
            num_warps=4,
        )
    block_b, block_v = _unabsorb_blocks(batch, heads, partial.device)
    _unabsorb_kernel[(heads, triton.cdiv(batch, block_b), V_HEAD_DIM // block_v)](
        o_latent,
        w_kv_b,
        o_heads,
        batch,
        heads,
        w_kv_b.stride(0),
        o_heads.stride(0),
        o_heads.stride(1),
        RANK=rank,
        NOPE=QK_NOPE_HEAD_DIM,
        V_DIM=V_HEAD_DIM,
        BLOCK_B=block_b,
        BLOCK_V=block_v,
        BLOCK_R=64,
        PER_HEAD_UV=_PER_HEAD_UV,
        INTERPRETED=interpreted,
        num_warps=4,
        num_stages=3,
    )
    return o_latent


def _splits_vector(num_splits: int, interpreted: bool) -> int:
    """The merge's vector of split log-sum-exps: one size for every shape, except under the interpreter."""
    return max(2, triton.next_power_of_2(num_splits)) if interpreted else MAX_SPLITS


def _descriptor_scratch(size: int, alignment: int, stream) -> torch.Tensor:
    """Global memory for the tensor descriptors kernel 3 builds on the device (128 bytes per program)."""
    return torch.empty(size, dtype=torch.int8, device="cuda")


def _check_params(params: dict) -> None:
    expected = {
        "kv_lora_rank": KV_LORA_RANK,
        "qk_nope_head_dim": QK_NOPE_HEAD_DIM,
        "qk_rope_head_dim": QK_ROPE_HEAD_DIM,
        "v_head_dim": V_HEAD_DIM,
    }
    for name, value in expected.items():
        if params[name] != value:
            raise ValueError(f"kernels are specialized for {name}={value}, got {params[name]}")


def run(inputs: dict[str, torch.Tensor], outputs: dict[str, torch.Tensor], params: dict, trace: dict | None = None) -> None:
    _check_params(params)
    q_nope, q_pe, kv_a = inputs["q_nope"], inputs["q_pe"], inputs["kv_a"]
    gamma, w_kv_b = inputs["kv_a_norm_weight"], inputs["w_kv_b"]
    positions, cache_lens, kv_cache = inputs["positions"], inputs["cache_lens"], inputs["kv_cache"]
    block_table, o_heads = inputs["block_table"], outputs["o_heads"]
    for name, tensor in (
        ("q_nope", q_nope),
        ("q_pe", q_pe),
        ("kv_a", kv_a),
        ("w_kv_b", w_kv_b),
        ("kv_cache", kv_cache),
        ("block_table", block_table),
        ("o_heads", o_heads),
    ):
        if tensor.stride(-1) != 1:
            raise ValueError(f"{name} must be contiguous in its last dimension")
    batch, heads, _ = q_nope.shape
    page = kv_cache.shape[1]  # rows per page, from the pool itself (a constexpr of the kernels)
    capacity = block_table.shape[1] * page  # the longest a request's cache can be
    device = kv_cache.device
    paging = (block_table.stride(0), kv_cache.stride(0), kv_cache.stride(1))
    rank, rope = KV_LORA_RANK, QK_ROPE_HEAD_DIM
    interpreted = device.type != "cuda"  # Triton's CPU interpreter: see _dot_operand and _round_to

    inv_freq = _inv_freq(params, device)
    magnitude = _rope_magnitude(params)
    scale = _softmax_scale(params)
    config = _attention_config(batch, heads, capacity, device)
    num_splits = config["num_splits"]
    splits_pow2 = _splits_vector(num_splits, interpreted)

    q = torch.empty((batch, heads, rank + rope), dtype=q_nope.dtype, device=device)
    partial = torch.empty((batch, heads, num_splits, rank), dtype=torch.float32, device=device)
    lse = torch.empty((batch, heads, num_splits), dtype=torch.float32, device=device)

    _paged_kv_append_kernel[(batch,)](
        kv_a,
        gamma,
        inv_freq,
        positions,
        cache_lens,
        block_table,
        kv_cache,
        kv_a.stride(0),
        *paging,
        params["rms_norm_eps"],
        magnitude,
        RANK=rank,
        ROPE=rope,
        PAGE_SIZE=page,
        APPLY_NORM=_APPLY_KV_NORM,
        INTERPRETED=interpreted,
        num_warps=4,
    )

    block_b = _batch_block(batch, interpreted)
    # 256 columns and 8 warps a program: kernel 2 alone on the H200 (L2 flushed)
    # took 29.2 us at B=64 H=128 and 11.7 at B=8,
    # against 33.2 and 27.0 with 64 columns and 4 warps; the last program of each row block ropes q_pe
    block_c, q_warps = 256, 8
    _q_prepare_kernel[(heads, triton.cdiv(batch, block_b), rank // block_c + 1)](
        q_nope,
        q_pe,
        w_kv_b,
        inv_freq,
        positions,
        q,
        batch,
        q_nope.stride(0),
        q_nope.stride(1),
        q_pe.stride(0),
        q_pe.stride(1),
        w_kv_b.stride(0),
        q.stride(0),
        q.stride(1),
        magnitude,
        RANK=rank,
        NOPE=QK_NOPE_HEAD_DIM,
        ROPE=rope,
        V_DIM=V_HEAD_DIM,
        BLOCK_B=block_b,
        BLOCK_C=block_c,
        INTERPRETED=interpreted,
        num_warps=q_warps,
    )

    block_h = config["BLOCK_H"]
    if not interpreted:
        triton.set_allocator(_descriptor_scratch)  # kernel 3 builds its tensor descriptors in global scratch
    grid = (triton.cdiv(heads, block_h), config["programs"])  # one run of the batch's tiles per program
    _paged_attention_kernel[grid](
        q,
        kv_cache,
        block_table,
        cache_lens,
        partial,
        lse,
        heads,
        num_splits,
        kv_cache.shape[0],
        batch,
        config["programs"],
        config["min_tiles"],
        q.stride(0),
        q.stride(1),
        *paging,
        partial.stride(0),
        partial.stride(1),
        partial.stride(2),
        lse.stride(0),
        lse.stride(1),
        scale * _LOG2E,
        RANK=rank,
        ROPE=rope,
        PAGE_SIZE=page,
        BLOCK_H=block_h,
        BLOCK_N=config["BLOCK_N"],
        INTERPRETED=interpreted,
        LENS_BLOCK=64,
        SPLITS_POW2=splits_pow2,
        num_warps=config["num_warps"],
        num_stages=config["num_stages"],
    )

    o_latent = _merge_and_unabsorb(partial, lse, w_kv_b, o_heads, splits_pow2, interpreted)

    if trace is not None:
        _record_trace(trace, q, kv_cache, block_table, cache_lens, o_latent, lse, o_heads, scale, splits_pow2, interpreted)


def _record_trace(trace, q, kv_cache, block_table, cache_lens, o_latent, lse, o_heads, scale, splits_pow2, interpreted) -> None:
    """Trace-only kernels, launched after the fast path's; they never write what the fast path reads. o_latent is
    the merge's own output (what the un-absorption read)."""
    batch, heads, _ = q.shape
    page = kv_cache.shape[1]
    capacity = block_table.shape[1] * page
    device = q.device
    paging = (block_table.stride(0), kv_cache.stride(0), kv_cache.stride(1))
    rank, rope = KV_LORA_RANK, QK_ROPE_HEAD_DIM
    num_splits = lse.shape[2]
    block_h = 16  # trace only: small head blocks keep it free of register spills

    c_kv = torch.empty((batch, rank), dtype=kv_cache.dtype, device=device)
    k_pe = torch.empty((batch, rope), dtype=kv_cache.dtype, device=device)
    _trace_paged_appended_rows_kernel[(batch,)](
        kv_cache, block_table, cache_lens, c_kv, k_pe, *paging, RANK=rank, ROPE=rope, PAGE_SIZE=page, num_warps=4
    )

    scores = torch.empty((batch, heads, capacity), dtype=torch.float32, device=device)
    probs = torch.empty_like(scores)
    block_n = 128 if interpreted else 32  # the interpreter's time grows with the programs: fewer, longer tiles there
    _trace_paged_scores_probs_kernel[(triton.cdiv(heads, block_h), triton.cdiv(capacity, block_n), batch)](
        q,
        kv_cache,
        block_table,
        cache_lens,
        lse,
        scores,
        probs,
        heads,
        capacity,
        num_splits,
        q.stride(0),
        q.stride(1),
        *paging,
        lse.stride(0),
        lse.stride(1),
        scale,
        scale * _LOG2E,
        RANK=rank,
        ROPE=rope,
        PAGE_SIZE=page,
        BLOCK_H=block_h,
        BLOCK_N=block_n,
        SPLITS_POW2=splits_pow2,
        INTERPRETED=interpreted,
        num_warps=4,
    )
    trace.update(
        {
            "c_kv": c_kv,
            "q_pe_roped": q[..., rank:],
            "k_pe_roped": k_pe,
            "kv_cache": kv_cache.clone(),
            "q_absorbed": q[..., :rank],
            "scores": scores,
            "probs": probs,
            "o_latent": o_latent,
            "o_heads": o_heads.clone(),
        }
    )
