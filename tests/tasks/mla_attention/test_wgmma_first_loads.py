"""The wgmma kernel 3's loads around its griddepcontrol.wait (launch_overlap=pdl_all), run on the CPU.

The template's own device functions (`swizzled`, `load_rows`, `load_rows_by_chunk`, `load_appended_row`,
`load_first_tiles_around_the_wait`) are cut from the rendered CUDA and compiled as host C++ by g++, with cp.async and
the grid-dependency wait emulated: a copy is in flight from its issue until a `cp_async_wait` lands its group (then its
bytes are written), and the wait marks the thread's later copies as after it. Each of warpgroup 1's 128 threads runs
`load_first_tiles_around_the_wait`, then the kernel's `cp_async_wait<0>`, at split shapes that put the appended row in a
split's first tile, its second, past both, or in another split. Checked: the shared memory then holds Q and the first
two tiles exactly as the serial kernel loads them (rows past the request's tokens zero); nothing before the wait reads
q or the appended row (kernel 2's and kernel 1's to write); each piece of the appended row is loaded by the thread that
zero-filled it before the wait, and never while that zero-fill is still in flight (two copies of one thread to one place
in flight have no order). What the GPU alone can show (the wait itself, the launch) is
tests/gpu/test_wgmma_attention_gpu.py's."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from ferret.roles.offline import TemplateSearchOptimizer
from tasks.variants import import_file

REPO = Path(__file__).resolve().parents[3]
TEMPLATES = REPO / "tasks" / "mla_attention" / "templates"
FUNCTIONS = ("swizzled", "load_rows", "load_rows_by_chunk", "load_appended_row", "load_first_tiles_around_the_wait")

HARNESS = r"""
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
using std::min;
#define __device__
#define __forceinline__ inline
typedef unsigned short bf16;
typedef unsigned char u8;
typedef unsigned int u32;
typedef unsigned long long u64;
%(defines)s

static u8 shared[SMEM_USED];
static int zero_filled_by[SMEM_USED / 16], in_flight_at[SMEM_USED / 16];
static int after_wait, thread_now, errors, groups;
static const u8 *q_lo, *q_hi, *appended_lo, *appended_hi;
struct Copy { u32 dst; const u8* src; int bytes, group; };
static std::vector<Copy> in_flight;  // this thread's copies not landed yet

static void fail(const char* what, unsigned at) {
    if (errors++ < 5) std::printf("%%s (shared byte %%u, thread %%d)\n", what, at, thread_now);
}

// cp.async emulated: in flight from its issue to the cp_async_wait that lands its group. `dst` is a byte offset (the
// harness's shared base is 0).
inline void cp_async_16(u32 dst, const void* src, int bytes) {
    if (dst %% 16 != 0 || dst + 16 > SMEM_USED) { fail("a copy outside shared memory", dst); return; }
    const u8* from = static_cast<const u8*>(src);
    const bool q = from >= q_lo && from < q_hi, appended = from >= appended_lo && from < appended_hi;
    if (bytes == 16) {
        if (!after_wait && q) fail("q read before the wait", dst);
        if (!after_wait && appended) fail("the appended row read before the wait", dst);
        if (after_wait && appended && zero_filled_by[dst / 16] != thread_now)
            fail("an appended piece loaded by a thread that did not zero-fill it before the wait", dst);
    } else if (bytes == 0) {
        if (!after_wait) zero_filled_by[dst / 16] = thread_now;
    } else {
        fail("a copy of neither 16 bytes nor a zero-fill", dst);
    }
    if (in_flight_at[dst / 16]) fail("a second copy to a piece whose first is still in flight", dst);
    in_flight_at[dst / 16] = 1;
    in_flight.push_back({dst, from, bytes, groups});
}
inline void cp_async_commit() { ++groups; }
// Lands every committed group but the N most recent, in issue order.
template <int N> inline void cp_async_wait() {
    std::vector<Copy> still;
    for (const Copy& c : in_flight) {
        if (c.group < groups - N) {
            if (c.bytes) std::memcpy(shared + c.dst, c.src, 16); else std::memset(shared + c.dst, 0, 16);
            in_flight_at[c.dst / 16] = 0;
        } else {
            still.push_back(c);
        }
    }
    in_flight.swap(still);
}
inline void grid_dependency_wait() { after_wait = 1; }

%(functions)s

static bf16 value(int row, int column) { return (bf16)(1 + ((row * 577 + column * 7) & 0x7FFF)); }

// argv: tokens (the request's, the appended row included), start (the split's first row), split_tiles, heads_left
int main(int argc, char** argv) {
    if (argc != 5) return 2;
    const int tokens = std::atoi(argv[1]), start = std::atoi(argv[2]), split_tiles = std::atoi(argv[3]);
    const int heads_left = std::atoi(argv[4]);
    const int end = min(start + split_tiles * BLOCK_N, tokens);
    const int tiles = (end - start + BLOCK_N - 1) / BLOCK_N;
    const int rows = tokens + 2 * BLOCK_N;
    std::vector<bf16> cache((size_t)rows * WIDTH), q((size_t)BLOCK_H * WIDTH);
    for (int r = 0; r < rows; ++r)
        for (int c = 0; c < WIDTH; ++c) cache[(size_t)r * WIDTH + c] = value(r, c);
    for (int h = 0; h < BLOCK_H; ++h)
        for (int c = 0; c < WIDTH; ++c) q[(size_t)h * WIDTH + c] = value(100000 + h, c);
    q_lo = (const u8*)q.data(); q_hi = q_lo + q.size() * sizeof(bf16);
    appended_lo = (const u8*)(cache.data() + (size_t)(tokens - 1) * WIDTH); appended_hi = appended_lo + WIDTH * sizeof(bf16);
    std::memset(shared, 0xAB, sizeof shared);
    for (int i = 0; i < SMEM_USED / 16; ++i) zero_filled_by[i] = -1;
    for (thread_now = 0; thread_now < 128; ++thread_now) {  // warpgroup 1's threads, one after another
        after_wait = 0;
        groups = 0;
        load_first_tiles_around_the_wait(0, q.data(), WIDTH, heads_left, cache.data(), WIDTH, start, tokens, tiles,
                                         thread_now);
        cp_async_wait<0>();  // the kernel's, after the call
        if (!after_wait) fail("no grid-dependency wait", 0);
    }
    thread_now = -1;
    for (int k = 0; k < min(tiles, 2); ++k)
        for (int r = 0; r < BLOCK_N; ++r)
            for (int piece = 0; piece < PIECES_PER_ROW; ++piece) {
                const int row = start + k * BLOCK_N + r;
                const u32 at = SMEM_KV + k * TILE_BYTES + (piece >> 3) * CHUNK_BYTES + swizzled(r, piece & 7);
                bf16 expected[8] = {0, 0, 0, 0, 0, 0, 0, 0};
                if (row < tokens) std::memcpy(expected, &cache[(size_t)row * WIDTH + piece * 8], 16);
                if (std::memcmp(shared + at, expected, 16) != 0) fail("a cache piece not as the serial kernel loads it", at);
            }
    for (int h = 0; h < BLOCK_H; ++h)
        for (int piece = 0; piece < PIECES_PER_ROW; ++piece) {
            const u32 at = SMEM_Q + (piece >> 3) * CHUNK_BYTES + swizzled(h, piece & 7);
            bf16 expected[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            if (h < heads_left) std::memcpy(expected, &q[(size_t)h * WIDTH + piece * 8], 16);
            if (std::memcmp(shared + at, expected, 16) != 0) fail("a piece of Q not as the serial kernel loads it", at);
        }
    std::printf("%%s\n", errors ? "FAILED" : "ok");
    return errors ? 1 : 0;
}
"""


def _function(code: str, name: str) -> str:
    """The device function `name`, from its `__device__` line to its closing brace."""
    match = re.search(r"^__device__ __forceinline__ [^\n(]*\b" + name + r"\(", code, re.M)
    assert match, f"{name} is not in the rendered CUDA"
    depth, body = 0, code.index("{", match.end())
    for index in range(body, len(code)):
        depth += {"{": 1, "}": -1}.get(code[index], 0)
        if depth == 0:
            return code[match.start() : index + 1]
    raise AssertionError(f"{name}: no closing brace")


@pytest.fixture(scope="module")
def first_loads(tmp_path_factory) -> Path:
    compiler = shutil.which("g++")
    if compiler is None:
        pytest.skip("no g++ to compile the loads as host code")
    optimizer = TemplateSearchOptimizer(TEMPLATES)
    point = optimizer.space.canonical({**optimizer.space.default, "attention_kernel": "wgmma", "launch_overlap": "pdl_all"})
    folder = tmp_path_factory.mktemp("first_loads")
    (folder / "pdl_all.py").write_text(optimizer.render(point))
    code = import_file(folder / "pdl_all.py", "wgmma_pdl_all_first_loads")._WGMMA_ATTENTION.code
    defines = "\n".join(line for line in code.splitlines() if line.startswith("#define "))
    source = HARNESS % {"defines": defines, "functions": "\n\n".join(_function(code, f) for f in FUNCTIONS)}
    (folder / "first_loads.cpp").write_text(source)
    binary = folder / "first_loads"
    subprocess.run(
        [compiler, "-std=c++17", "-O1", "-o", str(binary), str(folder / "first_loads.cpp")],
        check=True,
        capture_output=True,
        text=True,
    )
    return binary


@pytest.mark.parametrize(
    "tokens,start,split_tiles,heads_left",
    [
        (1, 0, 2, 64),  # one token: the appended row is the tile's first, every older row none
        (64, 0, 2, 64),  # the appended row the first tile's last; one tile
        (65, 0, 2, 40),  # the second tile's first row; 40 heads (Q's other rows zero)
        (128, 0, 2, 64),  # the second tile's last row
        (200, 128, 2, 64),  # a later split: its second tile's row 7
        (300, 256, 2, 17),  # a later split of one tile
        (130, 128, 1, 64),  # splits of one tile
        (4096, 3840, 4, 64),  # the appended row in the split's fourth tile: loaded in the tile loop, not here
        (4096, 0, 2, 64),  # a split before the request's last: no appended row in it
    ],
)
def test_the_loads_around_the_wait_fill_q_and_the_first_tiles_as_the_serial_kernel_does(
    first_loads, tokens, start, split_tiles, heads_left
):
    result = subprocess.run(
        [str(first_loads), str(tokens), str(start), str(split_tiles), str(heads_left)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stdout + result.stderr
