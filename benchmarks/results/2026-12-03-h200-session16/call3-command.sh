# call 3 (session 16, snapshot 06d6e35): the streamed merge with its [rows, splits, RANK] chunks loaded as
# [rows, RANK, splits] instead (old/merge_t.py: the committed candidate with three lines changed, so that each thread's
# registers hold all the splits of its columns and the sum over splits needs no shared memory; session 15's ncu saw the
# committed merge stalled on shared memory, MIO throttle) beside the committed candidate, each kernel's device time
set -u
export PYTHONPATH=/tmp/site:$PWD FERRET_GATES_DIR=/tmp/gates PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../.whl/*.whl
start=$(date +%s)
timeout 220 python3 benchmarks/mla_template_bench.py --out /tmp/bench --budget-s 130 --kernels --no-peers --point "" --candidate old/merge_t.py \
  --shapes full_h128_b8_l4096 full_h128_b1_l4096 tp1_b8_l4096 full_h128_b64_l4096 tp8_b32_l8192 > $OUT/call3-bench.log 2>&1
echo "bench rc=$? $(( $(date +%s) - start ))s" >> $OUT/call3-bench.log
cp /tmp/bench/mla-template-bench.jsonl $OUT/call3-bench.jsonl; cp /tmp/bench/mla-template-bench.md $OUT/call3-bench.md
grep -A14 "Device time per kernel" $OUT/call3-bench.log | grep "merge_splits" | cut -c1-60,100-400
grep -h "rc=" $OUT/call3-bench.log
