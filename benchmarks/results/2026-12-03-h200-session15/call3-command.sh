# call 3 (session 15, snapshot 67af396): HEAD on the GPU. The honest candidates of every op and the bf16-partials
# mutant through the gate under three parallel pytest workers (the judge's wait for its GPU turn is its own phase,
# gpu_turn_timing, since e96148f); then the paged and compile-once GPU tests
set -u
export PYTHONPATH=/tmp/site:$PWD FERRET_GATES_DIR=/tmp/gates PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../.whl/*.whl
start=$(date +%s)
timeout 400 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_gpu_gates.py -k "honest or bf16_partials" -n 3 -rA > $OUT/call3-gates.log 2>&1
echo "pytest rc=$? $(( $(date +%s) - start ))s" >> $OUT/call3-gates.log
for f in /tmp/gates/*/report.json; do cp "$f" "$OUT/call3-report-$(basename "$(dirname "$f")" | cut -c1-12).json"; done
start=$(date +%s)
timeout 150 python3 -m pytest -v -p no:cacheprovider -m gpu tests/tasks/mla_attention/test_compile_once_gpu.py tests/tasks/mla_attention_paged/test_paged_compile_once_gpu.py tests/tasks/mla_attention_paged/test_paged_gpu.py > $OUT/call3-gpu-tests.log 2>&1
echo "pytest rc=$? $(( $(date +%s) - start ))s" >> $OUT/call3-gpu-tests.log
grep -h "seconds by phase\|speed full\|speed tp" $OUT/call3-gates.log | cut -c1-400
grep -h "rc=\|passed\|failed" $OUT/call3-gates.log $OUT/call3-gpu-tests.log | tail -6
