# call 5 (session 14): kernel 3 reading q per tile through TMA descriptors (q_loads=descriptors) against the default,
# whole step (do_bench, L2 flushed) and each kernel's device time; no peers (call 4 measured them)
set -u
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../.whl/*.whl
start=$(date +%s)
timeout 150 python3 benchmarks/mla_template_bench.py --out $OUT/bench --budget-s 80 --no-peers --kernels \
  --point "" --point q_loads=descriptors,token_block=32 --point q_loads=descriptors,num_stages=1 \
  --shapes full_h128_b64_l4096 tp1_b64_l4096 tp1_b8_l4096 > $OUT/call5-bench.log 2>&1
echo "bench rc=$? $(( $(date +%s) - start ))s" >> $OUT/call5-bench.log
tail -2 $OUT/call5-bench.log
