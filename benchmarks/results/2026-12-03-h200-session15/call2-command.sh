# call 2 (session 15, snapshot 838a898): the one-split-at-a-time merge (default point then) beside the committed candidate
# before it (old/triton_mla_before.py), four variants of its blocks (old/merge_*.py) and min_tokens_per_split=128,
# each kernel's device time; then the honest MLA candidate (the new merge) through the gate at production shapes
set -u
export PYTHONPATH=/tmp/site:$PWD FERRET_GATES_DIR=/tmp/gates PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../.whl/*.whl
start=$(date +%s)
timeout 200 python3 benchmarks/mla_template_bench.py --out /tmp/bench --budget-s 130 --kernels --point "" --point min_tokens_per_split=128 \
  --candidate old/triton_mla_before.py --candidate old/merge_unroll1.py --candidate old/merge_rows1.py --candidate old/merge_rows16.py --candidate old/merge_fullrows.py \
  --shapes full_h128_b8_l4096 full_h128_b1_l4096 full_h128_b64_l4096 tp1_b64_l4096 tp8_b32_l8192 > $OUT/call2-bench.log 2>&1
echo "bench rc=$? $(( $(date +%s) - start ))s" >> $OUT/call2-bench.log
cp /tmp/bench/mla-template-bench.jsonl $OUT/call2-bench.jsonl; cp /tmp/bench/mla-template-bench.md $OUT/call2-bench.md
start=$(date +%s)
timeout 330 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_gpu_gates.py -k "mla_attention and honest" -rA > $OUT/call2-gate.log 2>&1
echo "pytest rc=$? $(( $(date +%s) - start ))s" >> $OUT/call2-gate.log
for f in /tmp/gates/*/report.json; do cp "$f" "$OUT/call2-report-$(basename "$(dirname "$f")" | cut -c1-12).json"; done
grep -A40 "Device time per kernel" $OUT/call2-bench.log | grep "merge_splits" | sed 's/heads<=64,tokens=64,warps=8,stages=2,split>=\([0-9]*\),balanced-runs,programs\/SM=1,wave-splits,streamed-merge,tma-descriptors/default split>=\1/'
grep -h "rc=" $OUT/call2-bench.log $OUT/call2-gate.log; tail -5 $OUT/call2-gate.log
