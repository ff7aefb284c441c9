# call 1 (snapshot of 4720ae5; first attempt failed in 19.5 s: .whl/ was not in this checkout, pydantic missing)
set -u
export PYTHONPATH=/tmp/site:$PWD FERRET_GATES_DIR=/tmp/gates PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../.whl/*.whl
start=$(date +%s)
left() { echo $(( 510 - ($(date +%s) - start) )); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv > $OUT/call1-gpu.txt 2>&1
timeout 360 python3 benchmarks/mla_template_bench.py --out $OUT/bench --shapes tp1_b64_l4096 tp1_b8_l4096 tp8_b32_l8192 h128_b64_l4096 h128_b1_l4096 \
  --rounds 3 --kernels --point '' --point 'split_chunk=capacity,min_tokens_per_split=1024' --point 'split_chunk=balanced' \
  --point 'split_chunk=balanced,min_tokens_per_split=512' --point 'split_chunk=balanced,num_warps=16' --budget-s 300 > $OUT/call1-bench.log 2>&1
echo "bench rc=$? $(( $(date +%s) - start ))s" >> $OUT/call1-bench.log
timeout $(( $(left) - 5 )) python3 -m pytest -q -p no:cacheprovider tests/gpu/test_gpu_gates.py -k "simplifications or bf16_partials" -n 3 > $OUT/call1-mutants.log 2>&1
echo "mutants rc=$? $(( $(date +%s) - start ))s" >> $OUT/call1-mutants.log
