#!/usr/bin/env bash
# Wheels for an offline GPU machine: a machine with a GPU, Python 3.12 on x86-64 Linux and torch, triton, cupy,
# cuda-bindings, jinja2, pyyaml, rich, numpy, safetensors and transformers installed, but no network. Run this on a
# connected machine; it downloads into .whl/ (git-ignored) what such a machine lacks:
#   - pydantic and its parts (pydantic-core at the version this pydantic pins, annotated-types, typing-inspection);
#   - sgl-flash-mla, FlashMLA's kernels, the peer that `python -m benchmarks mla` times beside ours; pinned to 1.0.0,
#     the build whose kernels run on Hopper (sm_90) that benchmarks/results/2026-12-06-h100-mla-flashmla-peer.md used.
# Carry .whl/ to the GPU machine with the repository, and there, from the repository's root:
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
#   export PYTHONPATH=/tmp/site:$PWD
set -euo pipefail
cd "$(dirname "$0")/.."
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 \
         manylinux1_x86_64; do platforms+=(--platform "$p"); done
download() { python3 -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp "${platforms[@]}" -d .whl "$@"; }
download --no-deps "pydantic>=2.7"
core=$(unzip -p .whl/pydantic-2*.whl '*/METADATA' | sed -n 's/^Requires-Dist: pydantic-core\s*\(==[^ ;]*\).*/\1/p' | head -1)
download --no-deps "pydantic-core${core}" annotated-types typing-inspection
download --no-deps "sgl-flash-mla==1.0.0"
ls .whl
