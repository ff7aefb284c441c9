"""Input distributions of the MLA decode task, and a generator that follows them.

Chosen so that attention is peaked as in real models (random N(0, s) weights give nearly flat
attention, which hides scale and softmax errors):
  raw logit std ~ 256 * std(q_nope) * std(w_kv_b)  (latent part: 128-long then 512-long sums)
              (+) 8 * std(q_pe)                     (rope part: 64-long sum, unit-variance cache)
  with 1.5, 0.05 and 2.5 the parts are ~19 and ~20, ~3.8 together after the 0.135 scale: the top
  probability averages ~0.33 at L=4096 and ~0.25 at L=16384 (uniform: 0.00024 and 0.00006), and the
  1/sqrt(576) scale flattens it to ~0.01 (tests/tasks/mla_attention/test_input_peakedness.py).
kv_a is drawn at std 2 and the layernorm gamma away from 1 so that skipping kv_a_layernorm is visible.
Positions are independent of the cache length and mostly past YaRN's 4096 original context, where
plain-theta rope differs most.
The spec uses the contract's vocabulary (contracts/mla_attention.yaml): normal(std), uniform(low, high),
randint(low, high) with both bounds inclusive, as expressions over B, H, L.
"""
from __future__ import annotations

import torch

INPUT_SPECS: dict[str, dict] = {
    "q_nope": {"shape": ("B", "H", 128), "dtype": torch.bfloat16, "dist": "normal", "std": 1.5},
    "q_pe": {"shape": ("B", "H", 64), "dtype": torch.bfloat16, "dist": "normal", "std": 2.5},
    "kv_a": {"shape": ("B", 576), "dtype": torch.bfloat16, "dist": "normal", "std": 2.0},
    "kv_a_norm_weight": {"shape": (512,), "dtype": torch.bfloat16, "dist": "uniform", "low": 0.5, "high": 1.5},
    "w_kv_b": {"shape": ("H*256", 512), "dtype": torch.bfloat16, "dist": "normal", "std": 0.05},
    "positions": {"shape": ("B",), "dtype": torch.int64, "dist": "randint", "low": "2048", "high": "16384"},
    "cache_lens": {"shape": ("B",), "dtype": torch.int32, "dist": "randint", "low": "0", "high": "L - 1"},
    "kv_cache": {"shape": ("B", "L", 576), "dtype": torch.bfloat16, "dist": "normal", "std": 1.0},
}


def _size(dim, dims: dict[str, int]) -> int:
    return dim if isinstance(dim, int) else int(eval(dim, {"__builtins__": {}}, dims))


def make_inputs(batch: int, heads: int, cache_capacity: int, seed: int = 0, device: str = "cpu",
                cache_lens: list[int] | None = None, positions: list[int] | None = None,
                stds: dict[str, float] | None = None) -> dict[str, torch.Tensor]:
    """Inputs drawn from INPUT_SPECS; cache_lens / positions / stds may be overridden (tests, ablations)."""
    dims = {"B": batch, "H": heads, "L": cache_capacity}
    generator = torch.Generator().manual_seed(seed)
    inputs = {}
    for name, spec in INPUT_SPECS.items():
        shape = tuple(_size(d, dims) for d in spec["shape"])
        if spec["dist"] == "normal":
            std = stds[name] if stds and name in stds else spec["std"]
            value = torch.randn(shape, generator=generator) * std
        elif spec["dist"] == "uniform":
            value = torch.rand(shape, generator=generator) * (spec["high"] - spec["low"]) + spec["low"]
        else:
            low, high = _size(spec["low"], dims), _size(spec["high"], dims)
            value = torch.randint(low, high + 1, shape, generator=generator)  # inclusive bounds
        inputs[name] = value.to(spec["dtype"])
    if cache_lens is not None:
        inputs["cache_lens"] = torch.tensor(cache_lens, dtype=torch.int32)
    if positions is not None:
        inputs["positions"] = torch.tensor(positions, dtype=torch.int64)
    return {name: t.to(device) for name, t in inputs.items()}
