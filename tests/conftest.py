"""Test-wide set-up: Triton runs under its CPU interpreter when no GPU is present; one CPU thread per process."""

import os

# Before torch is imported, here and (passed through by the sandbox) in every candidate process: the suite runs on two
# pytest workers, each waiting on its own checks' processes, and torch's default of one OpenMP thread per core in
# each of them oversubscribes the cores. On this 2-core machine (2026-12-03) the MLA checks of
# tests/gate/test_discrimination.py on two workers took 166-192 s without a limit, 152-171 s with one thread in the
# judge's processes and 145 s with one in the candidates' too.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402

try:
    import torch  # noqa: E402

    _HAS_CUDA = torch.cuda.is_available()
except Exception:  # torch missing: every test that needs it fails loudly on import
    _HAS_CUDA = False

if not _HAS_CUDA:
    # Must be set before triton is first imported by any test module.
    os.environ.setdefault("TRITON_INTERPRET", "1")
    # Kernels run in the test process get the interpreter the judge gives candidates' processes (the same bits, less
    # time: ferret/sandbox/interpreter.py).
    from ferret.sandbox.interpreter import prepare_interpreter  # noqa: E402

    prepare_interpreter()

# No test ever sends a request to a real model provider (test models are unaffected).
os.environ["FERRET_FORBID_MODEL_REQUESTS"] = "1"


def pytest_collection_modifyitems(config, items):
    if _HAS_CUDA:
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU (run on a CUDA machine with `pytest -m gpu`)")
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
