#!/usr/bin/env bash
# The wheels a GPU machine of the `device` tool lacks (its image has torch, triton, cupy, cuda-bindings, jinja2, pyyaml,
# rich, numpy, safetensors, transformers, but not pydantic), downloaded here into .whl/ (git-ignored through
# .git/info/exclude) for Python 3.12 on x86-64 Linux: pydantic and its parts, and sgl-flash-mla (FlashMLA, the peer
# of benchmarks/mla_template_bench.py; its own needs are on the image). A call names `.whl` in `carry` and starts with
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
# as benchmarks/gpu_*.sh and the results' callN-command.sh files do.
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 \
         manylinux1_x86_64; do platforms+=(--platform "$p"); done
download() { python3 -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp "${platforms[@]}" -d .whl "$@"; }
download --no-deps "pydantic>=2.7"
# its needs the image lacks (typing-extensions is there): pydantic-core at the version this pydantic pins
core=$(unzip -p .whl/pydantic-2*.whl '*/METADATA' | sed -n 's/^Requires-Dist: pydantic-core\s*\(==[^ ;]*\).*/\1/p' | head -1)
download --no-deps "pydantic-core${core}" annotated-types typing-inspection
download --no-deps sgl-flash-mla
ls .whl
