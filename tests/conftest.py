"""Test-wide set-up: Triton runs under its CPU interpreter when no GPU is present."""
import os

import pytest

try:
    import torch

    _HAS_CUDA = torch.cuda.is_available()
except Exception:  # torch missing: every test that needs it fails loudly on import
    _HAS_CUDA = False

if not _HAS_CUDA:
    # Must be set before triton is first imported by any test module.
    os.environ.setdefault("TRITON_INTERPRET", "1")

# No test ever sends a request to a real model provider (test models are unaffected).
os.environ["FERRET_FORBID_MODEL_REQUESTS"] = "1"


def pytest_collection_modifyitems(config, items):
    if _HAS_CUDA:
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU (run on the H200 with `pytest -m gpu`)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


@pytest.fixture(autouse=True, scope="session")
def _private_trust_registry(tmp_path_factory):
    """Gates built by the tests are recorded in a registry of their own, not the user's."""
    previous = os.environ.get("FERRET_TRUST_DIR")
    os.environ["FERRET_TRUST_DIR"] = str(tmp_path_factory.mktemp("ferret-trust"))
    yield
    if previous is None:
        os.environ.pop("FERRET_TRUST_DIR", None)
    else:
        os.environ["FERRET_TRUST_DIR"] = previous
