"""Kernels that ran during a candidate's timed calls without a counted launch (`guards.foreign_kernels`), on the
names the profiler gives: torch's own kernels and the candidate's launched ones pass; a library's (CuPy's array
operations, cuBLAS called directly) is named with its count; a kernel named like a library's cannot cover for it."""

from __future__ import annotations

from ferret.bench.guards import foreign_kernels

TORCH_FILL = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
    "std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)"
)
TORCH_SCAN = "void at_cuda_detail::cub::DeviceScanKernel<int*, int*>(int*, int*, int)"
CUBLAS = "nvjet_sm90_tst_128x256_64x4_2x1_v_bz_coopA_NNT"
CUPY_SUM = "cupy_sum__float32_float32"


def test_the_candidates_launches_and_torchs_own_kernels_are_accounted_for():
    executed = {
        "_rmsnorm_kernel": 5,
        "rmsnorm_bf16": 5,
        TORCH_FILL: 5,
        TORCH_SCAN: 5,
        "Memset (Device)": 5,
        "void rmsnorm_row<float>(float const*, float*)": 5,
    }
    launched = {"_rmsnorm_kernel": 5, "rmsnorm_bf16": 5, "_Z11rmsnorm_rowIfEvPKfPf": 5}
    assert foreign_kernels(executed, launched) == {}


def test_library_kernels_without_a_launch_are_named_with_their_counts():
    executed = {"rmsnorm_bf16": 5, CUPY_SUM: 5, CUBLAS: 10}
    assert foreign_kernels(executed, {"rmsnorm_bf16": 5}) == {CUPY_SUM: 5, CUBLAS: 10}


def test_a_launched_kernel_named_like_a_library_kernel_cannot_cover_for_it():
    """The candidate launched (or pretended to launch) a kernel of cuBLAS's name once per call, and cuBLAS ran too."""
    assert foreign_kernels({CUBLAS: 10}, {CUBLAS: 5}) == {CUBLAS: 5}


def test_torch_is_recognised_by_its_namespaces_not_by_a_substring():
    """`cutlass::`, `float::` hold "at::" as text: they are not torch's."""
    cutlass = "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_nn_align8>(Params)"
    assert foreign_kernels({cutlass: 1}, {}) == {cutlass: 1}
