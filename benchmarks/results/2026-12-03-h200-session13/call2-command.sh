# call 2 (session 13, snapshot in COMMIT): the GPU compile-once tests on the batch-block point and the paged GPU
# tests; then the honest candidates of every op and the bf16-partials mutant through the gate at production shapes
# under three parallel pytest workers, now taking turns on the GPU (ferret/gate/gpu_turns.py)
set -u
export PYTHONPATH=/tmp/site:$PWD FERRET_GATES_DIR=/tmp/gates PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../.whl/*.whl
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/call2-gpu.txt 2>&1
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" >> $OUT/call2-gpu.txt 2>&1
start=$(date +%s)
timeout 120 python3 -m pytest -q -p no:cacheprovider -m gpu tests/tasks/mla_attention_paged/test_paged_gpu.py tests/tasks/mla_attention_paged/test_paged_compile_once_gpu.py tests/tasks/mla_attention/test_compile_once_gpu.py -rA > $OUT/call2-gpu-tests.log 2>&1
echo "pytest rc=$? $(( $(date +%s) - start ))s" >> $OUT/call2-gpu-tests.log
start=$(date +%s)
timeout 420 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_gpu_gates.py -k "honest or bf16_partials" -n 3 -rA > $OUT/call2-gates.log 2>&1
echo "pytest rc=$? $(( $(date +%s) - start ))s" >> $OUT/call2-gates.log
for f in /tmp/gates/*/report.json; do cp "$f" "$OUT/call2-report-$(basename "$(dirname "$f")" | cut -c1-12).json"; done
grep -h "pytest rc" $OUT/call2-gpu-tests.log $OUT/call2-gates.log
