# call 3 (session 13, snapshot in COMMIT): the GPU compile-once tests (call 2 ran out of its 120 s), each test named
# as it ends; then the default point (balanced + streamed + descriptors) beside torch.compile and FlashMLA at
# 128 heads, every request at L=4096, B in {1, 8, 64, 128} (the table shapes)
set -u
export PYTHONPATH=/tmp/site:$PWD FERRET_GATES_DIR=/tmp/gates PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../.whl/*.whl
start=$(date +%s)
timeout 170 python3 -m pytest -v -p no:cacheprovider -m gpu tests/tasks/mla_attention/test_compile_once_gpu.py tests/tasks/mla_attention_paged/test_paged_compile_once_gpu.py tests/tasks/mla_attention_paged/test_paged_gpu.py --durations=0 > $OUT/call3-gpu-tests.log 2>&1
echo "pytest rc=$? $(( $(date +%s) - start ))s" >> $OUT/call3-gpu-tests.log
start=$(date +%s)
timeout 270 python3 benchmarks/mla_template_bench.py --out $OUT/bench --budget-s 150 --point "" --shapes h128_b1_l4096 h128_b8_l4096 h128_b64_l4096 h128_b128_l4096 > $OUT/call3-bench.log 2>&1
echo "bench rc=$? $(( $(date +%s) - start ))s" >> $OUT/call3-bench.log
grep -h "rc=" $OUT/call3-gpu-tests.log $OUT/call3-bench.log
