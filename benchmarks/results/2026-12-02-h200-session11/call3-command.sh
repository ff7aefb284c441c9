# call 3 (snapshot of 83846d4)
set -u
export PYTHONPATH=/tmp/site:$PWD FERRET_GATES_DIR=/tmp/gates PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../.whl/*.whl
start=$(date +%s)
timeout 200 python3 benchmarks/mla_template_bench.py --out $OUT/bench --shapes tp1_b64_l4096 tp1_b8_l4096 tp8_b32_l8192 \
  --rounds 3 --kernels --no-peers --point '' --point 'side_kernels=streamed' --point 'split_chunk=balanced,side_kernels=streamed' \
  --point 'split_chunk=balanced,min_tokens_per_split=512,side_kernels=streamed' --point 'split_chunk=capacity,min_tokens_per_split=1024,side_kernels=streamed' \
  --point 'split_chunk=balanced,min_tokens_per_split=512,side_kernels=streamed,kv_loads=descriptors' --budget-s 160 > $OUT/call3-bench.log 2>&1
echo "bench rc=$? $(( $(date +%s) - start ))s" >> $OUT/call3-bench.log
rm -rf $OUT/bench/points
