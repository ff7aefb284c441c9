"""The rope task: reference against transformers' DeepSeek-V3 rope, baseline and Triton candidate against it.

Runs on the CPU (Triton interpreter) or, where CUDA is present, on the GPU with real kernels.
float32 angles drift from the exact ones in proportion to the angle (up to a few fp32 ulps of
position * inv_freq), so cos/sin are checked element-wise against a bound that grows with the angle,
and y is checked tightly against the float64 rotation by the implementation's own cos/sin tables.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch
from task_checks import bitwise_equal, relative_error_bound, stage_errors  # tests/fixtures

from tasks.rope import DEFAULT_PARAMS, STAGES, baseline
from tasks.rope.candidates import triton_rope
from tasks.rope.reference import (
    check_against_oracle,
    inverse_frequencies,
    reference,
    transformers_config,
    yarn_correction_range,
)

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
IMPLEMENTATIONS = {"baseline": baseline.run, "triton": triton_rope.run}
PLAIN_ROPE_PARAMS = {**copy.deepcopy(DEFAULT_PARAMS), "rope_scaling": None}

# cos/sin: |error| <= TABLE_ABS + ANGLE_REL * |angle|. ANGLE_REL is ~8 fp32 ulps of the angle:
# rounding of position * inv_freq, plus inv_freq's own error (ex2.approx on the GPU) times position.
TABLE_ABS = 1e-6
ANGLE_REL = 5e-7
INV_FREQ_TOLERANCE = 5e-7  # max |error| / max |inv_freq|, float32 math in every dtype
# (rel_l2, max_abs / max |ref|) of y against the float64 rotation by the implementation's own tables,
# from rounding error analysis (tests/fixtures/task_checks.py: relative_error_bound): the rotation's
# float32 work (two products and a sum per element: under (sqrt(2) + 1) u32 of its pair's norm, which
# bounds both metrics; the bound for a reduction over n = 2, (8 + 6 sqrt(2)) u32, covers it) plus one
# rounding to the output dtype (one ulp: the interpreter truncates to bfloat16).
ROTATION_TOLERANCE = {dtype: (relative_error_bound(2, dtype),) * 2 for dtype in DTYPES}

CASES = [  # (tokens, heads, largest position)
    (5, 3, 16384),  # odd heads, positions past 4096 where plain theta diverges from YaRN
    (1, 1, 16384),  # a single token and head (k_pe)
    (7, 16, 16384),  # q_pe with TP8's 16 heads
    (33, 1, 16384),  # k_pe: many tokens packed per program, a ragged last block
    (3, 128, 16384),  # q_pe with all 128 heads: several head blocks per token
    (9, 5, 64),  # short positions, where the angle term is small and the check tight
]


def y_tolerance(dtype: torch.dtype, max_angle: float) -> tuple[float, float]:
    """y against the exact reference: the rotation tolerance plus the angle drift (|dy| <= |x| |dangle|)."""
    drift = 2 * (TABLE_ABS + ANGLE_REL * max_angle)
    rel_l2, peak = ROTATION_TOLERANCE[dtype]
    return rel_l2 + drift, peak + drift


def assert_y_within(actual, expected, dtype, max_angle, what="y"):
    rel_l2, peak_rel = stage_errors(actual, expected)
    max_rel_l2, max_peak_rel = y_tolerance(dtype, max_angle)
    assert rel_l2 <= max_rel_l2 and peak_rel <= max_peak_rel, (
        f"{what} ({dtype}): rel_l2 {rel_l2:.3e} (limit {max_rel_l2:.2e}), max_abs/peak {peak_rel:.3e} (limit {max_peak_rel:.2e})"
    )


def assert_table_within(stage: str, actual: torch.Tensor, expected: dict[str, torch.Tensor], positions):
    angle = positions.to("cpu", torch.float64)[:, None].abs() * expected["inv_freq"].cpu()[None, :]
    err = (actual.detach().to("cpu", torch.float64) - expected[stage].cpu()).abs()
    excess = (err / (TABLE_ABS + ANGLE_REL * angle)).max().item()
    assert excess <= 1.0, f"{stage}: error reaches {excess:.2f}x its angle-scaled bound"


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """float64 interleaved rotation of x by the given tables."""
    x = x.to(torch.float64)
    cos, sin = cos.to(torch.float64)[:, None, :], sin.to(torch.float64)[:, None, :]
    x_even, x_odd = x[..., 0::2], x[..., 1::2]
    return torch.stack((x_even * cos - x_odd * sin, x_odd * cos + x_even * sin), dim=-1).flatten(-2)


def make_inputs(tokens: int, heads: int, max_position: int, dtype: torch.dtype, seed: int):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(tokens, heads, 64, generator=generator)
    positions = torch.randint(0, max_position, (tokens,), generator=generator)
    special = torch.tensor([max_position - 1, 0, 4096, 4095, 1])
    special = special[special < max_position][:tokens]
    positions[: len(special)] = special
    return {"x": x.to(dtype).to(DEVICE), "positions": positions.to(DEVICE)}


def run_implementation(run, inputs, trace: dict | None) -> torch.Tensor:
    y = torch.full_like(inputs["x"], float("nan"))  # the judge's poison: anything unwritten stays NaN
    run(inputs, {"y": y}, copy.deepcopy(DEFAULT_PARAMS), trace)
    return y


def check_implementation(run, inputs, dtype: torch.dtype) -> None:
    before = {k: v.clone() for k, v in inputs.items()}
    expected = reference(inputs, DEFAULT_PARAMS)
    max_angle = inputs["positions"].abs().max().item() * expected["inv_freq"].max().item()
    trace: dict = {}
    traced_y = run_implementation(run, inputs, trace)
    fast_y = run_implementation(run, inputs, None)
    again_y = run_implementation(run, inputs, None)

    assert fast_y.dtype == dtype
    assert_y_within(fast_y, expected["y"], dtype, max_angle)
    assert bitwise_equal(fast_y, traced_y), "traced run changed the final output"
    assert bitwise_equal(fast_y, again_y), "two fast runs differ"
    assert set(trace) == {"inv_freq", "cos", "sin"}, f"trace holds {sorted(trace)}"
    _, inv_freq_err = stage_errors(trace["inv_freq"], expected["inv_freq"])
    assert inv_freq_err <= INV_FREQ_TOLERANCE, f"inv_freq error {inv_freq_err:.2e}"
    for stage in ("cos", "sin"):
        assert trace[stage].shape == expected[stage].shape
        assert_table_within(stage, trace[stage], expected, inputs["positions"])
    # With its own tables, only the rotation's rounding remains: a tight check that the long-position
    # angle budget above cannot hide.
    own_rotation = rotate(inputs["x"], trace["cos"], trace["sin"])
    assert_y_within(fast_y, own_rotation, dtype, max_angle=0.0, what="y against its own cos/sin")
    for name, value in inputs.items():
        assert bitwise_equal(value, before[name]), f"input {name} was mutated"


def test_reference_matches_transformers_oracle():
    result = check_against_oracle()
    assert result["passed"], result
    assert result["rope_type"] == "yarn"


def test_transformers_yarn_frequencies_are_deepseek_v3s():
    """Trust the oracle only after it shows the YaRN numbers (mla-math.md): low 10, high 23, pairs
    0..10 at theta's frequency, 23..31 divided by 40, a linear blend between, no cos/sin scale."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    config = transformers_config(DEFAULT_PARAMS)
    assert config.rope_parameters.get("rope_type") == "yarn"
    assert config.head_dim == 64
    inv_freq, cos_sin_scale = ROPE_INIT_FUNCTIONS["yarn"](config)
    assert cos_sin_scale == 1.0

    pair = torch.arange(32, dtype=torch.float64)
    ratio = inv_freq.double() / 10000.0 ** (-2 * pair / 64)
    blend = 1 - ((pair - 10) / 13).clamp(0, 1) * (1 - 1 / 40)
    torch.testing.assert_close(ratio, blend, rtol=1e-6, atol=0)
    torch.testing.assert_close(ratio[:11], torch.ones(11, dtype=torch.float64), rtol=1e-6, atol=0)
    torch.testing.assert_close(ratio[23:], torch.full((9,), 1 / 40, dtype=torch.float64), rtol=1e-6, atol=0)
    assert (ratio[11:23] < 1).all() and (ratio[11:23] > 1 / 40).all()

    def correction_dim(rotations):
        return 64 * math.log(4096 / (2 * math.pi * rotations)) / (2 * math.log(10000))

    assert correction_dim(32) == pytest.approx(10.47, abs=0.01)
    assert correction_dim(1) == pytest.approx(22.51, abs=0.01)
    assert yarn_correction_range(DEFAULT_PARAMS) == (10, 23)


def test_default_transformers_config_is_the_plain_rope_trap():
    """A DeepseekV3Config without rope_parameters is plain theta-10000 rope: an oracle built from it
    would validate the very bug the task must catch."""
    from transformers import DeepseekV3Config
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3RotaryEmbedding

    trap = DeepseekV3RotaryEmbedding(DeepseekV3Config())
    assert trap.rope_type == "default"
    yarn = inverse_frequencies(DEFAULT_PARAMS)
    assert (trap.inv_freq.double()[23:] / yarn[23:]).min() > 39


def test_plain_rope_diverges_from_yarn_at_long_positions():
    """The plain-theta simplification agrees at short positions and must be visible past them."""
    x = torch.randn(4, 8, 64, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    for positions, agree in (([16, 16, 16, 16], True), ([1024, 5000, 9000, 16383], False)):
        inputs = {"x": x, "positions": torch.tensor(positions)}
        yarn_y = reference(inputs, DEFAULT_PARAMS)["y"].flatten(1)
        plain_y = reference(inputs, PLAIN_ROPE_PARAMS)["y"].flatten(1)
        cosine = torch.nn.functional.cosine_similarity(yarn_y, plain_y, dim=-1)
        assert (cosine > 0.99).all() if agree else (cosine < 0.9).all(), cosine


def test_reference_returns_float64_stages_and_leaves_inputs_alone():
    inputs = make_inputs(5, 3, 16384, torch.bfloat16, seed=1)
    before = {k: v.clone() for k, v in inputs.items()}
    stages = reference(inputs, DEFAULT_PARAMS)
    assert list(stages) == list(STAGES)
    assert stages["inv_freq"].shape == (32,) and stages["cos"].shape == (5, 32) and stages["y"].shape == (5, 3, 64)
    assert all(v.dtype == torch.float64 for v in stages.values())
    for name in inputs:
        assert bitwise_equal(inputs[name], before[name])


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"T{c[0]}-H{c[1]}-pos{c[2]}")
def test_implementation_matches_reference(impl, dtype, case: tuple[int, int, int]):
    check_implementation(IMPLEMENTATIONS[impl], make_inputs(*case, dtype, seed=sum(case)), dtype)


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # inf * 0 in the interpreter
@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_implementation_propagates_inf_and_nan(impl, dtype):
    # Positions 0..2 only: the signs of cos and sin there are far from 0, so float32 and float64 agree
    # on every inf * cos; at position 0, sin is exactly 0 and inf * sin is NaN in both.
    inputs = make_inputs(3, 2, 3, dtype, seed=9)
    inputs["positions"] = torch.tensor([0, 1, 2], device=DEVICE)
    x = inputs["x"]
    x[0, 0, 0] = float("inf")
    x[1, 1, 5] = float("-inf")
    x[2, 0, 10] = float("nan")
    x[2, 1, 0:2] = 0.0
    check_implementation(IMPLEMENTATIONS[impl], inputs, dtype)


def _rotate_half_unpermuted(x, positions):
    """Pairs (i, i + 32) rotated instead of DeepSeek's (2i, 2i + 1)."""
    stages = reference({"x": x, "positions": positions}, DEFAULT_PARAMS)
    cos, sin = stages["cos"][:, None, :], stages["sin"][:, None, :]
    first, second = x[..., :32].double(), x[..., 32:].double()
    return torch.cat((first * cos - second * sin, second * cos + first * sin), dim=-1)


@pytest.mark.parametrize(
    "wrong",
    [
        pytest.param(lambda x, p: reference({"x": x, "positions": p}, PLAIN_ROPE_PARAMS)["y"], id="plain-theta"),
        pytest.param(_rotate_half_unpermuted, id="rotate-half-unpermuted"),
        pytest.param(lambda x, p: reference({"x": x, "positions": p + 1}, DEFAULT_PARAMS)["y"], id="position-plus-one"),
    ],
)
def test_tolerance_rejects_wrong_math(wrong):
    """Even the loosest check, y against the reference with the long-position angle budget, must
    expose these mistakes."""
    inputs = make_inputs(16, 4, 16384, torch.float32, seed=3)
    x, positions = inputs["x"].cpu(), inputs["positions"].cpu()
    expected = reference(inputs, DEFAULT_PARAMS)
    max_angle = positions.max().item() * expected["inv_freq"].max().item()
    with pytest.raises(AssertionError):
        assert_y_within(wrong(x, positions), expected["y"], torch.float32, max_angle)
