# call 1 (session 13, snapshot in COMMIT): the new default (balanced + streamed + descriptors) through the gate at
# production shapes with the contract's full-length speed cases, contiguous and paged; the bf16-partials mutant; the
# honest rmsnorm under three parallel workers (the wall-clock guard's three tries); the paged and compile-once GPU tests
set -u
export PYTHONPATH=/tmp/site:$PWD FERRET_GATES_DIR=/tmp/gates PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../.whl/*.whl
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/call1-gpu.txt 2>&1
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" >> $OUT/call1-gpu.txt 2>&1
start=$(date +%s)
timeout 360 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_gpu_gates.py -k "honest or bf16_partials" -n 3 -rA > $OUT/call1-gates.log 2>&1
echo "pytest rc=$? $(( $(date +%s) - start ))s" >> $OUT/call1-gates.log
start=$(date +%s)
timeout 170 python3 -m pytest -q -p no:cacheprovider -m gpu tests/tasks/mla_attention_paged/test_paged_gpu.py tests/tasks/mla_attention_paged/test_paged_compile_once_gpu.py tests/tasks/mla_attention/test_compile_once_gpu.py -x > $OUT/call1-gpu-tests.log 2>&1
echo "pytest rc=$? $(( $(date +%s) - start ))s" >> $OUT/call1-gpu-tests.log
for f in /tmp/gates/*/report.json; do cp "$f" "$OUT/call1-report-$(basename "$(dirname "$f")" | cut -c1-12).json"; done
tail -3 $OUT/call1-gates.log $OUT/call1-gpu-tests.log
