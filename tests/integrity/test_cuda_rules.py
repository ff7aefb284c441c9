"""The scan's rules for CUDA C++ inside a candidate (ferret/integrity/rules/cuda.py): each cheat CUDA makes newly
possible, written as a launcher, is named at its line in the file; the honest CUDA candidate and the same words
inside comments are not."""

from __future__ import annotations

from pathlib import Path

import pytest

from ferret.integrity.scan import scan_file, scan_source

REPO = Path(__file__).resolve().parents[2]

LAUNCHER = '''from ferret.backends import cuda

KERNELS = cuda.Source(r"""
extern "C" __global__ void k(const float* x, float* y, int n) {{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
{body}
}}
""")


def run(inputs, outputs, params, trace=None):
    KERNELS.launch("k", (1,), (32,), (inputs["x"], outputs["y"], cuda.i32(1)))
'''
BODY_LINE = 6  # the line of `{body}` in the file


def _scan(body: str, prelude: str = ""):
    source = LAUNCHER.format(body=body)
    if prelude:
        source = source.replace('cuda.Source(r"""\n', 'cuda.Source(r"""\n' + prelude + "\n")
    return scan_source(source)


@pytest.mark.parametrize(
    ("body", "cheat"),
    [
        ("    cudaStream_t s; cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);", "side_stream_or_thread"),
        ("    if (i == 0) k<<<1, 32>>>(x, y, n);", "side_stream_or_thread"),
        ("    long long t = clock64(); if (t > 0) y[i] = x[i];", "warmup_detection"),
        ('    unsigned long long t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));', "warmup_detection"),
        ("    float* h; cudaHostGetDevicePointer((void**)&h, (void*)x, 0);", "reading_expected"),
        ("    cublasSgemv(handle, CUBLAS_OP_N, n, n, &one, x, n, x, 1, &zero, y, 1);", "library_call"),
        ("    cudaStreamAttrValue v; v.accessPolicyWindow.num_bytes = n;", "persisting_l2"),
    ],
)
def test_each_cuda_cheat_is_named_at_its_line(body, cheat):
    findings = _scan(body).findings
    # (the Python scan's own tables may also name a banned word on the string's first line: accessPolicyWindow)
    assert (cheat, BODY_LINE) in [(f.cheat, f.line) for f in findings] and {f.cheat for f in findings} == {cheat}


def test_state_kept_in_device_memory_between_launches_is_named():
    findings = _scan(
        "    y[i] = x[i] * (calls > 3 ? 0.f : 1.f); if (i == 0) atomicAdd(&calls, 1);", prelude="__device__ int calls = 0;"
    ).findings
    assert [(f.cheat, f.line) for f in findings] == [("cross_call_caching", 4)], findings


def test_a_library_header_is_named():
    findings = _scan("    y[i] = x[i];", prelude="#include <cublas_v2.h>").findings
    assert [(f.cheat, f.line) for f in findings] == [("library_call", 4)], findings


def test_words_in_comments_and_device_functions_are_not_findings():
    prelude = (
        "// no clock64() here, nor cudaStreamCreate\n/* __device__ int calls; */\n"
        "__device__ float twice(float v) { return 2.f * v; }\n__constant__ float table[4];"
    )
    assert _scan("    if (i < n) y[i] = twice(x[i]); // clock64()", prelude=prelude).findings == []


def test_a_source_built_at_run_time_is_named():
    source = (
        LAUNCHER.format(body="    y[i] = x[i];")
        .replace('KERNELS = cuda.Source(r"""', 'PARTS = ["", r"""')
        .replace('""")', '"""]\nKERNELS = cuda.Source("".join(PARTS))')
    )
    findings = scan_source(source).findings
    assert [f.cheat for f in findings] == ["decoy_kernel"] and "not a string literal" in findings[0].message


def test_a_source_bound_to_a_module_level_literal_is_read():
    source = (
        LAUNCHER.format(body="    y[i] = x[i];")
        .replace('KERNELS = cuda.Source(r"""', 'CODE = r"""')
        .replace('""")', '"""\nKERNELS = cuda.Source(CODE)')
    )
    assert scan_source(source).findings == []


def test_the_honest_cuda_candidate_passes_the_scan():
    assert scan_file(REPO / "tasks" / "rmsnorm" / "candidates" / "cuda_rmsnorm.py").findings == []


def test_a_launcher_may_import_the_cuda_backend_and_nothing_else_of_ferrets():
    def on_the_import(source: str) -> list[str]:
        return [
            f.cheat
            for f in scan_source(
                source + "\ndef run(inputs, outputs, params, trace=None):\n    outputs['y'].copy_(inputs['x'])\n"
            ).findings
            if f.line == 1
        ]

    assert on_the_import("from ferret.backends import cuda") == []
    assert on_the_import("from ferret.gate import judge") == ["reference_import"]
    assert on_the_import("import cupy") != [], "CuPy stays out of reach: the backend compiles and launches"


def test_cupys_array_operations_are_library_compute_wherever_they_appear():
    source = (
        "import torch\nimport cupy\n\ndef run(inputs, outputs, params, trace=None):\n"
        "    cupy.multiply(cupy.asarray(inputs['x']), 2, out=cupy.asarray(outputs['y']))\n"
    )
    named = {(f.cheat, f.line) for f in scan_source(source).findings}
    assert {("library_call", 2), ("persisting_l2", 2), ("library_call", 5)} <= named, named


def test_cudas_math_constants_are_not_the_persisting_l2_runtime_but_its_controls_are():
    prelude = "#include <math_constants.h>"
    assert _scan("    y[i] = -CUDART_INF_F;", prelude=prelude).findings == []
    findings = _scan("    cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, 1 << 20);").findings
    assert ("persisting_l2", BODY_LINE) in [(f.cheat, f.line) for f in findings]


def test_the_honest_cuda_softmax_passes_the_scan():
    assert scan_file(REPO / "tasks" / "softmax" / "candidates" / "cuda_softmax.py").findings == []


def test_the_judges_cuda_headers_may_be_included_and_nothing_else_of_ferrets():
    assert _scan("    y[i] = x[i];", prelude="#include <ferret/dtypes.cuh>").findings == []
    named = _scan('    const char* p = "ferret/gate/judge.py";', prelude="#include <ferret/dtypes.cuh>").findings
    assert "reference_import" in {f.cheat for f in named}


def test_a_launcher_reaches_only_the_backends_launcher_api():
    def cheats(body: str) -> list[tuple[str, int]]:
        source = (
            "from ferret.backends import cuda\n\n\ndef run(inputs, outputs, params, trace=None):\n"
            "    outputs['y'].copy_(inputs['x'])\n" + body
        )
        return [(f.cheat, f.line) for f in scan_source(source).findings]

    assert cheats("    cuda.aligned(inputs['x'], to=16)\n    cuda.i32(1), cuda.i64(2), cuda.f32(3.0), cuda.NULL\n") == []
    # `os` re-exported by the backend's module is also a module reached under another module's name
    assert sorted(cheats("    env = cuda.os.environ\n")) == [("dynamic_access", 6), ("reading_expected", 6)]
    assert cheats("    cuda.compile_cubin('', [], 'sm_90')\n") == [("reading_expected", 6)]
