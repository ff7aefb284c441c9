"""On a GPU of compute capability 9.0 or more: `Source.launch(programmatic=True)` (ferret.backends.cuda) makes the
kernel a programmatic dependent of the kernel before it on torch's stream. A first kernel lets its dependents launch
at its start, then spins (10 ms) and writes a buffer; the second records the GPU's clock as it starts,
waits for the first (griddepcontrol.wait) and copies the buffer. Launched programmatically, the second starts before
the first ends and still copies what it wrote; launched as usual, it starts after.

Both kernels are launched once, programmatically, before the pair that is looked at, so that the pair's launches do
not load the module or the driver's binding on the host: on an H100 (2026-12-05) the test without that warm-up saw the
second kernel start 50 ms after a 1 ms first kernel ended. The spin (10 ms) is the host's margin for the second
launch."""

from __future__ import annotations

import pytest
import torch

from ferret.backends import cuda

pytestmark = pytest.mark.gpu

KERNELS = r"""
extern "C" __global__ void write_late(int* buffer, unsigned long long* ended, int n, long long spin_ns) {
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now)); } while (now - start < (unsigned long long)spin_ns);
    for (int i = threadIdx.x; i < n; i += blockDim.x) buffer[i] = 3 * i + 1;
    __syncthreads();
    if (threadIdx.x == 0) { __threadfence(); asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now)); *ended = now; }
}

extern "C" __global__ void copy_after_wait(const int* buffer, int* out, unsigned long long* started, int n) {
    unsigned long long now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    if (threadIdx.x == 0) *started = now;
    asm volatile("griddepcontrol.wait;" ::: "memory");
    for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = buffer[i];
}
"""


@pytest.fixture(scope="module")
def source():
    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("programmatic launches need a GPU of compute capability 9.0 or more")
    return cuda.Source(KERNELS)


@pytest.mark.parametrize("programmatic", [True, False])
def test_a_programmatic_dependent_starts_before_the_kernel_it_follows_ends_and_reads_what_it_wrote(source, programmatic):
    n = 4096
    buffer = torch.zeros(n, dtype=torch.int32, device="cuda")
    out = torch.full((n,), -1, dtype=torch.int32, device="cuda")
    times = torch.zeros(2, dtype=torch.int64, device="cuda")  # [the first's end, the second's start], ns
    source.launch("write_late", (1,), (256,), (buffer, times[0:1], cuda.i32(n), cuda.i64(0)))
    source.launch("copy_after_wait", (1,), (256,), (buffer, out, times[1:2], cuda.i32(n)), programmatic=True)
    torch.cuda.synchronize()
    buffer.zero_()
    out.fill_(-1)
    times.zero_()
    source.launch("write_late", (1,), (256,), (buffer, times[0:1], cuda.i32(n), cuda.i64(10_000_000)))
    source.launch("copy_after_wait", (1,), (256,), (buffer, out, times[1:2], cuda.i32(n)), programmatic=programmatic)
    torch.cuda.synchronize()
    assert torch.equal(out, 3 * torch.arange(n, dtype=torch.int32, device="cuda") + 1)
    ended, started = times.tolist()
    assert (started < ended) is programmatic, (started, ended)
