"""The rmsnorm task: reference against an independent oracle, baseline and Triton candidate against it.

Runs on the CPU (Triton interpreter) or, where CUDA is present, on the GPU with real kernels.
Tolerances cover both: the interpreter truncates float32 -> bfloat16 (error up to 1 bf16 ulp, 2**-7
relative) where the GPU rounds to nearest (half that).
"""

from __future__ import annotations

import pytest
import torch
from task_checks import RowOpChecks, bitwise_equal  # tests/fixtures

from tasks.rmsnorm import DEFAULT_PARAMS, STAGES, baseline
from tasks.rmsnorm.candidates import triton_rmsnorm
from tasks.rmsnorm.reference import check_against_oracle, reference

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
IMPLEMENTATIONS = {"baseline": baseline.run, "triton": triton_rmsnorm.run}

# Limits from rounding error analysis (tests/fixtures/task_checks.py: relative_error_bound): the float32
# work over a row of n, (8 + 6 sqrt(n)) u32 relative (inv_rms is float32 math on exactly upcast inputs
# whatever the dtype), plus one rounding of y to the output dtype.
CHECKS = RowOpChecks(reference, DEFAULT_PARAMS, STAGES)
assert_within = CHECKS.assert_within
run_implementation = CHECKS.run_implementation
check_implementation = CHECKS.check_implementation

SHAPES = [
    (3, 1000),  # odd width, fused path
    (1, 1),  # a single element
    (4, 7168),  # DeepSeek-V3 hidden size
    (37, 64),  # short rows packed several per program, row count not a multiple of the pack
    (2, triton_rmsnorm.FUSED_MAX_N + 3617),  # past the fused limit: the two-pass long-row path
]


def make_inputs(m: int, n: int, dtype: torch.dtype, seed: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    # Rows of mixed magnitude (1e-3 .. 1e3): small rows make eps matter, large ones the scale.
    row_scale = torch.exp(torch.empty(m, 1).uniform_(-7, 7, generator=generator))
    x = torch.randn(m, n, generator=generator) * row_scale
    weight = 1.0 + 0.5 * torch.randn(n, generator=generator)
    return {"x": x.to(dtype).to(DEVICE), "weight": weight.to(dtype).to(DEVICE)}


@pytest.mark.quick
def test_reference_matches_torch_rms_norm_oracle():
    result = check_against_oracle()
    assert result["passed"], result


def test_reference_returns_float64_stages_and_leaves_inputs_alone():
    inputs = make_inputs(3, 17, torch.bfloat16, seed=1)
    before = {k: v.clone() for k, v in inputs.items()}
    stages = reference(inputs, DEFAULT_PARAMS)
    assert list(stages) == list(STAGES)
    assert stages["inv_rms"].shape == (3,) and stages["y"].shape == (3, 17)
    assert all(v.dtype == torch.float64 for v in stages.values())
    for name in inputs:
        assert bitwise_equal(inputs[name], before[name])


def test_reference_edge_rows_follow_float64_arithmetic():
    x = torch.tensor([[0.0, 0.0, 0.0], [1.0, float("inf"), 2.0], [1.0, float("nan"), 2.0]])
    stages = reference({"x": x, "weight": torch.ones(3)}, {"eps": 1e-6})
    assert stages["inv_rms"][0].item() == pytest.approx(1e3)
    assert stages["y"][0].eq(0).all()
    assert stages["inv_rms"][1].item() == 0.0
    assert stages["y"][1, 0] == 0 and stages["y"][1, 2] == 0 and stages["y"][1, 1].isnan()
    assert stages["inv_rms"][2].isnan() and stages["y"][2].isnan().all()


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_implementation_matches_reference(impl, dtype, shape: tuple[int, int]):
    check_implementation(IMPLEMENTATIONS[impl], make_inputs(*shape, dtype, seed=sum(shape)), dtype)


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # inf * 0 in the interpreter
@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("n", [1000, triton_rmsnorm.FUSED_MAX_N + 3617])
def test_implementation_zero_inf_and_nan_rows(impl, dtype, n):
    inputs = make_inputs(6, n, dtype, seed=7)
    x = inputs["x"]
    x[0] = 0.0
    x[1, n // 3] = float("inf")
    x[2, n - 1] = float("-inf")
    x[3, 0] = float("nan")
    x[4, 5], x[4, 6] = float("inf"), float("nan")
    check_implementation(IMPLEMENTATIONS[impl], inputs, dtype)


def test_candidate_paths_are_both_exercised():
    # The shape list must keep reaching both kernels if FUSED_MAX_N changes.
    assert any(n <= triton_rmsnorm.FUSED_MAX_N for _, n in SHAPES)
    assert any(n > triton_rmsnorm.FUSED_MAX_N for _, n in SHAPES)


@pytest.mark.parametrize(
    "wrong",
    [
        pytest.param(lambda x, w, eps: x / (x.pow(2).mean(-1, keepdim=True).sqrt() + eps) * w, id="eps-outside-sqrt"),
        pytest.param(lambda x, w, eps: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps), id="weight-ignored"),
        pytest.param(lambda x, w, eps: x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + eps) * w, id="sum-not-mean"),
    ],
)
def test_tolerance_rejects_wrong_math(wrong):
    """The float32 tolerance and the input distribution must expose plausible mistakes."""
    inputs = make_inputs(64, 1000, torch.float32, seed=3)
    wrong_y = wrong(inputs["x"], inputs["weight"], DEFAULT_PARAMS["eps"])
    with pytest.raises(AssertionError):
        assert_within("y", wrong_y, reference(inputs, DEFAULT_PARAMS)["y"], torch.float32)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_tolerance_accepts_transformers_deepseek_rmsnorm(dtype):
    """Hugging Face's DeepseekV3RMSNorm rounds x * inv_rms to the input dtype before the weight
    multiply: a legitimate variant one rounding away (two roundings to the dtype), which the limit for
    two roundings must not reject."""
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3RMSNorm

    inputs = make_inputs(8, 1000, dtype, seed=11)
    norm = DeepseekV3RMSNorm(1000, eps=DEFAULT_PARAMS["eps"]).to(device=DEVICE, dtype=dtype)
    with torch.no_grad():
        norm.weight.copy_(inputs["weight"])
        hf_y = norm(inputs["x"])
    assert_within("y", hf_y, reference(inputs, DEFAULT_PARAMS)["y"], dtype, output_roundings=2)


@pytest.mark.parametrize("shape", [(2, triton_rmsnorm.FUSED_MAX_N + 3617), (4, 7168)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_limit_rejects_a_low_precision_sum(shape: tuple[int, int]):
    """The limit grows with the row's length, but not so far that a mean of squares kept in float16 (a
    plausible shortcut) passes on the long rows the candidates must handle."""
    inputs = make_inputs(*shape, torch.float32, seed=sum(shape))
    x, weight = inputs["x"].cpu(), inputs["weight"].cpu()
    scale = x.abs().amax(-1, keepdim=True)  # keeps the squares inside float16's range
    mean_sq = ((x / scale) ** 2).half().sum(-1, keepdim=True).float() / x.shape[-1] * scale**2
    wrong = x * torch.rsqrt(mean_sq + DEFAULT_PARAMS["eps"]) * weight
    with pytest.raises(AssertionError):
        assert_within("y", wrong, reference(inputs, DEFAULT_PARAMS)["y"], torch.float32)
