"""The softmax task: reference against torch's float64 softmax, baseline and Triton candidate against it.

Runs on the CPU (Triton interpreter) or, where CUDA is present, on the GPU with real kernels.
Tolerances cover both: the interpreter truncates float32 -> bfloat16 (error up to 1 bf16 ulp, 2**-7
relative) where the GPU rounds to nearest (half that).
"""

from __future__ import annotations

import pytest
import torch
from task_checks import RowOpChecks, bitwise_equal  # tests/fixtures

from tasks.softmax import DEFAULT_PARAMS, STAGES, baseline
from tasks.softmax.candidates import triton_softmax
from tasks.softmax.reference import check_against_oracle, reference

# Under the interpreter, padding rows of a packed tile compute -inf - -inf, which numpy reports; the
# values are never stored.
pytestmark = pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
IMPLEMENTATIONS = {"baseline": baseline.run, "triton": triton_softmax.run}
LONG_N = triton_softmax.FUSED_MAX_N + 3617  # past the fused limit, not a multiple of the loop block

# Limits from rounding error analysis (tests/fixtures/task_checks.py: relative_error_bound): the float32
# work over a row of n, (8 + 6 sqrt(n)) u32 relative, plus one rounding of y to the output dtype. row_max
# is exact in any dtype (a max of exactly upcast values rounds nothing).
CHECKS = RowOpChecks(reference, DEFAULT_PARAMS, STAGES, exact_stages=("row_max",))
assert_within = CHECKS.assert_within
run_implementation = CHECKS.run_implementation
check_implementation = CHECKS.check_implementation

SHAPES = [
    (3, 1000),  # odd width, fused path
    (1, 1),  # a single element: y = 1
    (4, 7168),
    (37, 64),  # short rows packed several per program, row count not a multiple of the pack
    (2, 32768),  # long rows, a multiple of the loop block
    (3, LONG_N),  # long rows with a ragged last block
]


def make_inputs(m: int, n: int, dtype: torch.dtype, seed: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    # Row scales 0.05 .. 50: from nearly flat rows to peaked ones where one entry takes most of the
    # mass, as attention scores do; flat rows alone hide errors in the max and the normalization.
    row_scale = torch.exp(torch.empty(m, 1).uniform_(-3, 4, generator=generator))
    x = torch.randn(m, n, generator=generator) * row_scale
    return {"x": x.to(dtype).to(DEVICE)}


def test_reference_matches_torch_softmax_oracle():
    result = check_against_oracle()
    assert result["passed"], result


def test_reference_returns_float64_stages_and_leaves_inputs_alone():
    inputs = make_inputs(3, 17, torch.bfloat16, seed=1)
    before = inputs["x"].clone()
    stages = reference(inputs, DEFAULT_PARAMS)
    assert list(stages) == list(STAGES)
    assert stages["row_max"].shape == (3,) and stages["row_sum"].shape == (3,) and stages["y"].shape == (3, 17)
    assert all(v.dtype == torch.float64 for v in stages.values())
    assert bitwise_equal(inputs["x"], before)


def test_reference_defines_non_finite_rows():
    inf, nan = float("inf"), float("nan")
    x = torch.tensor([[-inf, -inf, -inf], [0.0, -inf, 0.0], [1.0, inf, 2.0], [1.0, nan, 2.0]])
    stages = reference({"x": x}, DEFAULT_PARAMS)
    assert stages["row_max"][0] == -inf and stages["row_sum"][0].isnan() and stages["y"][0].isnan().all()
    assert stages["y"][1].tolist() == [0.5, 0.0, 0.5]
    assert stages["row_max"][2] == inf and stages["row_sum"][2].isnan() and stages["y"][2].isnan().all()
    assert stages["row_max"][3].isnan() and stages["row_sum"][3].isnan() and stages["y"][3].isnan().all()


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_implementation_matches_reference(impl, dtype, shape: tuple[int, int]):
    check_implementation(IMPLEMENTATIONS[impl], make_inputs(*shape, dtype, seed=sum(shape)), dtype)


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("n", [1000, LONG_N])
def test_implementation_non_finite_and_degenerate_rows(impl, dtype, n):
    inf, nan = float("inf"), float("nan")
    block = triton_softmax.LONG_ROW_BLOCK
    inputs = make_inputs(10, n, dtype, seed=5)
    x = inputs["x"]
    x[0] = -inf  # every entry masked
    x[1, : n // 2] = -inf  # half masked
    x[2, n // 3] = inf
    x[3, 7] = nan
    x[4] = 0.0  # flat: y = 1/n everywhere
    x[5] = x[5].sign() * 3.0e4  # a tie between huge values (fits float16's range)
    x[6, : min(block, n - 1)] = -inf  # lanes that see only -inf in the first block, finite later
    x[7, 1:] = -inf  # a single live entry: y one-hot
    x[8, -1] = nan  # NaN in the ragged tail
    check_implementation(IMPLEMENTATIONS[impl], inputs, dtype)


def test_candidate_paths_are_both_exercised():
    # The shape list must keep reaching both kernels if FUSED_MAX_N changes.
    assert any(n <= triton_softmax.FUSED_MAX_N for _, n in SHAPES)
    assert any(n > triton_softmax.FUSED_MAX_N for _, n in SHAPES)


def _softmax_without_max_shift(x: torch.Tensor) -> torch.Tensor:
    e = torch.exp(x)
    return e / e.sum(-1, keepdim=True)


def _online_softmax_without_rescale(x: torch.Tensor, block: int = 256) -> torch.Tensor:
    # The classic online-softmax bug: the running sum is not rescaled when the running max grows.
    running_max = torch.full(x.shape[:-1] + (1,), float("-inf"), dtype=x.dtype)
    running_sum = torch.zeros_like(running_max)
    for start in range(0, x.shape[-1], block):
        chunk = x[..., start : start + block]
        running_max = torch.maximum(running_max, chunk.amax(-1, keepdim=True))
        running_sum = running_sum + torch.exp(chunk - running_max).sum(-1, keepdim=True)
    return torch.exp(x - running_max) / running_sum


def _softmax_in_bfloat16(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x.to(torch.bfloat16), dim=-1).to(x.dtype)


@pytest.mark.parametrize(
    "wrong",
    [
        pytest.param(_softmax_without_max_shift, id="no-max-shift"),
        pytest.param(_online_softmax_without_rescale, id="online-without-rescale"),
        pytest.param(_softmax_in_bfloat16, id="bfloat16-internal"),
    ],
)
def test_tolerance_rejects_wrong_math(wrong):
    """The float32 tolerance and the input distribution must expose plausible mistakes."""
    inputs = make_inputs(64, 1000, torch.float32, seed=3)
    x = inputs["x"].cpu()
    with pytest.raises(AssertionError):
        assert_within("y", wrong(x), reference(inputs, DEFAULT_PARAMS)["y"], torch.float32)


@pytest.mark.parametrize("shape", [(2, 32768), (4, 7168)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_limit_rejects_a_low_precision_sum(shape: tuple[int, int]):
    """The limit grows with the row's length, but not so far that a sum of exponentials kept in float16
    (a plausible shortcut, 1e-4 relative) passes on the long rows the candidates must handle."""
    inputs = make_inputs(*shape, torch.float32, seed=sum(shape))
    x = inputs["x"].cpu()
    e = torch.exp(x - x.amax(-1, keepdim=True))
    wrong = e / e.half().sum(-1, keepdim=True).float()
    with pytest.raises(AssertionError):
        assert_within("y", wrong, reference(inputs, DEFAULT_PARAMS)["y"], torch.float32)
