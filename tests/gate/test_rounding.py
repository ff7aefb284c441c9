"""The pattern of rounding at a named precision (ferret/gate/rounding.py): a stage rounded through bf16, fp16 or
fp8 is named with its format; a scale error, a wrong divisor, one wrong row among right ones (a scale on one row
of four, whose cosine with the stage is diluted to 1/2), zeros where the reference underflows, a few values on fp8's
grid by chance and a stage too small to tell are not named rounding, whatever their size."""

from __future__ import annotations

import pytest
import torch

from ferret.gate.rounding import rounding_of


def _rows(m: int = 16, n: int = 512, seed: int = 0) -> torch.Tensor:
    return torch.randn(m, n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _rmsnorm(x: torch.Tensor, divisor: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    inv = torch.rsqrt((x * x).sum(1) / (divisor or x.shape[1]) + 1e-6)
    return inv, x * inv[:, None]


@pytest.mark.parametrize(
    "dtype, name", [(torch.bfloat16, "bfloat16"), (torch.float16, "float16"), (torch.float8_e4m3fn, "float8_e4m3")]
)
def test_a_stage_rounded_through_a_coarser_format_is_named_with_that_format(dtype, name):
    reference = _rows()
    found = rounding_of(reference.to(dtype).float(), reference)
    assert (found.finding, found.precision) == ("rounding", name), found.why
    assert f"are {name} values" in found.why


def test_a_statistic_and_a_row_cut_to_bf16_read_as_bf16_rounding_in_a_bf16_output_too():
    x = _rows()
    inv, y = _rmsnorm(x)
    cut_inv = inv.float().to(torch.bfloat16).float()
    assert rounding_of(cut_inv, inv).precision == "bfloat16"
    weight = torch.rand(512, generator=torch.Generator().manual_seed(3), dtype=torch.float64) + 0.5
    # the row normalised in bf16, then weighted in float32: no longer on the bf16 grid, read as rounding noise
    cut_y = (x.float() * cut_inv[:, None]).to(torch.bfloat16).float() * weight.float()
    found = rounding_of(cut_y, y * weight)
    assert (found.finding, found.precision) == ("rounding", "bfloat16"), found.why
    assert "roundoffs of its norm" in found.why


@pytest.mark.parametrize("what", ["scale", "divisor", "one_row"])
def test_different_math_the_size_of_rounding_is_not_rounding(what):
    x = _rows()
    inv, y = _rmsnorm(x)
    if what == "scale":
        cand, ref, why = (y * (1 + 2.0**-8)).float(), y, "leans along the reference"
    elif what == "divisor":
        cand, ref, why = _rmsnorm(x, x.shape[1] + 1)[0].float(), inv, "leans along the reference"
    else:
        wrong = y.clone()
        wrong[3] *= 1 + 2.0**-6
        cand, ref, why = wrong.float(), y, "sits in 6.2% of the entries"
    found = rounding_of(cand, ref)
    assert found.finding == "not_rounding" and why in found.why, found


def test_a_dropped_term_of_one_sign_is_not_rounding_however_its_size_varies():
    # the last of 1025 columns left out of each row's sum of squares: inv_rms grows by x^2/(2*sum), a different
    # amount on each row, so its cosine with the stage sits near 1/2 and the lean alone decides by chance
    readings = []
    for seed in range(20):
        x = _rows(n=1025, seed=seed)
        inv, _ = _rmsnorm(x)
        dropped = torch.rsqrt((x[:, :-1] * x[:, :-1]).sum(1) / 1025 + 1e-6)
        readings.append(rounding_of(dropped.float(), inv))
    assert all(r.finding == "not_rounding" for r in readings), [r.why for r in readings]
    assert any("entries away from zero" in r.why for r in readings)


@pytest.mark.parametrize("bias", [0.0, 0.25], ids=["fair", "slightly_one_way"])
def test_rounding_noise_over_thousands_of_rows_reads_as_rounding(bias):
    # a statistic of 5000 rows rounded at bf16's size (a 1-D stage: its entries are the sign test's units); a
    # slight lean one way (60% of the rows, as a stagnating running sum gives) is significant over 5000 rows and
    # still rounding: the sign test asks for a share a dropped term of one sign makes, not significance alone
    generator = torch.Generator().manual_seed(0)
    reference = 1 + 0.05 * torch.randn(5000, generator=generator, dtype=torch.float64)
    noise = torch.randn(5000, generator=generator, dtype=torch.float64) + bias
    found = rounding_of((reference * (1 + 2.0**-9 * noise)).float(), reference)
    assert (found.finding, found.precision) == ("rounding", "bfloat16"), found.why


def test_a_stage_too_small_and_off_every_grid_says_so():
    x = _rows(m=3)
    inv, _ = _rmsnorm(x)
    found = rounding_of(_rmsnorm(x, x.shape[1] + 1)[0].float(), inv)
    assert found.finding == "too_small" and "3 entries" in found.why


def test_an_error_no_rounding_could_make_is_said_with_its_size():
    y = _rows()
    found = rounding_of((y + torch.randn_like(y)).float(), y)
    assert found.finding == "not_rounding" and "no rounding's size" in found.why


def test_a_scale_on_one_row_of_four_is_not_rounding():
    """One request's latent 1.55% too large among four right ones (an MLA c_kv): the error is the reference on that
    row, its cosine with the whole stage about 1/2 and a quarter of the entries touched; its middle row is right."""
    y = _rmsnorm(_rows(m=4))[1]
    wrong = y.clone()
    wrong[3] *= (528 / 512) ** 0.5
    found = rounding_of(wrong.to(torch.bfloat16), y)
    # Told apart by its spread: a quarter of the entries, where rounding to fp8 would touch nearly all.
    assert found.finding == "not_rounding" and "where rounding to float8_e4m3 would touch" in found.why, found


def test_rows_each_rounded_through_a_statistic_still_read_as_rounding():
    """A statistic rounded per row scales every row by its own small factor: every row has its share of the error."""
    x = _rows(m=8)
    inv, y = _rmsnorm(x)
    found = rounding_of((x * inv.to(torch.bfloat16).double()[:, None]).float(), y)
    assert (found.finding, found.precision) == ("rounding", "bfloat16"), found.why


def test_zeros_where_the_reference_underflows_are_no_grid_evidence():
    """A float32 stage of peaked probabilities: most reference entries underflow to zero in bf16, and a float32
    candidate's zeros there are on every grid. The few real values, off bf16's grid, say the stage is float32."""
    reference = torch.full((64,), 1e-50, dtype=torch.float64)
    reference[:4] = torch.tensor([0.61, 0.23, 0.11, 0.05], dtype=torch.float64) + 1e-4
    found = rounding_of(reference.float(), reference)
    assert found.finding != "rounding", found.why


def test_a_few_values_on_the_fp8_grid_are_chance_not_evidence():
    """A bf16 value is an fp8 value one time in 16: three of them are not evidence of a cut to fp8 (four are)."""
    base = torch.tensor([0.5, 0.75, 1.0, 1.25, -1.5, 2.0, -3.0, 0.875], dtype=torch.float64).repeat(8)
    reference, n_off = base.clone(), 3
    reference[:n_off] += 0.01  # off fp8's grid; every other entry is an fp8 value
    found = rounding_of(reference.to(torch.float8_e4m3fn).to(torch.bfloat16), reference)
    assert "float8_e4m3 values" not in found.why, found.why
    reference[: n_off + 1] += 0.01 * (torch.arange(n_off + 1) == n_off)
    found = rounding_of(reference.to(torch.float8_e4m3fn).to(torch.bfloat16), reference)
    assert found.precision == "float8_e4m3" and "4 of 4 values are float8_e4m3 values" in found.why, found.why
