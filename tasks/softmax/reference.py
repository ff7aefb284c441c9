"""Canonical softmax: every stage in float64 from the upcast inputs."""

from __future__ import annotations

import torch


def _check_dim(params: dict, ndim: int) -> None:
    dim = params.get("dim", -1)
    if dim not in (-1, ndim - 1):
        raise ValueError(f"only softmax along the last dimension is defined, got dim={dim}")


def reference(inputs: dict[str, torch.Tensor], params: dict) -> dict[str, torch.Tensor]:
    """Softmax of each row of `x`; returns float64 stages, never mutates inputs.

    row_max[m] = max_n x[m, n]                                        [M]
    row_sum[m] = sum_n exp(x[m, n] - row_max[m])                      [M]
    y[m, n]    = exp(x[m, n] - row_max[m]) / row_sum[m]               [M, N]

    Implementations compute in float32 and round y once to x's dtype.

    Non-finite rows follow float64 arithmetic on these formulas, which is what `torch.softmax` in
    float64 gives (the oracle test checks it):
    - entries equal to -inf (masked) contribute 0, as long as the row holds something larger;
    - a row entirely -inf: row_max = -inf, row_sum = NaN (-inf - -inf), y = NaN on the whole row;
    - a row holding +inf: row_max = +inf, row_sum = NaN (inf - inf), y = NaN on the whole row;
    - a NaN in a row: row_max = NaN (the max propagates NaN), row_sum and the whole row of y NaN.
    """
    x = inputs["x"].to(torch.float64)
    if x.dim() != 2:
        raise ValueError(f"expected x [M, N], got {tuple(x.shape)}")
    _check_dim(params, x.dim())
    # amax propagates NaN, which `max` semantics above require.
    row_max = x.amax(dim=-1)
    shifted_exp = torch.exp(x - row_max[:, None])
    row_sum = shifted_exp.sum(dim=-1)
    y = shifted_exp / row_sum[:, None]
    return {"row_max": row_max, "row_sum": row_sum, "y": y}


def check_against_oracle(seed: int = 0) -> dict:
    """Compare `reference` with `torch.softmax` (y) and `torch.logsumexp` (row_sum) in float64.

    Rows include peaked and flat ones, masked (-inf) entries, and rows of -inf, +inf and NaN.
    Returns `{"passed": bool, "oracle": str, "max_rel_err": float, "nan_positions_match": bool}`.
    """
    generator = torch.Generator().manual_seed(seed)
    worst = 0.0
    nan_match = True
    for m, n in [(8, 1000), (1, 1), (3, 32768)]:
        scale = torch.exp(torch.empty(m, 1, dtype=torch.float64).uniform_(-3, 4, generator=generator))
        x = torch.randn(m, n, dtype=torch.float64, generator=generator) * scale
        if m >= 8:
            x[0] = float("-inf")
            x[1, n // 3] = float("inf")
            x[2, 5] = float("nan")
            x[3, : n // 2] = float("-inf")
        ours = reference({"x": x}, {"dim": -1})
        oracle_y = torch.softmax(x, dim=-1)
        oracle_row_sum = torch.exp(torch.logsumexp(x, dim=-1) - x.amax(dim=-1))
        for got, want in ((ours["y"], oracle_y), (ours["row_sum"], oracle_row_sum)):
            nan_match &= bool(torch.equal(torch.isnan(got), torch.isnan(want)))
            finite = torch.isfinite(want)
            if finite.any():
                err = (got[finite] - want[finite]).abs().max().item()
                worst = max(worst, err / want[finite].abs().max().item())
    return {
        "passed": nan_match and worst <= 1e-12,
        "oracle": "torch.softmax and torch.logsumexp (float64)",
        "max_rel_err": worst,
        "nan_positions_match": nan_match,
    }
