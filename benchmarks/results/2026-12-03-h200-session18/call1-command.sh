# call 1 (session 18): merge variants (one (request, head) row per program, [splits, columns] loads; old/*.py are the
# committed candidate with the merge replaced) beside the committed candidate, each kernel's device time; then kernel 3's
# sizing at B=1 and B=8 (more, smaller programs); then Nsight Compute on kernel 3 at B=1
set -u
export PYTHONPATH=/tmp/site:$PWD FERRET_GATES_DIR=/tmp/gates PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../.whl/*.whl
{ date -u; nvidia-smi; python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } > $OUT/call1-gpu.txt 2>&1
start=$(date +%s)
timeout 260 python3 benchmarks/mla_template_bench.py --out /tmp/bench --budget-s 200 --kernels --no-peers --point "" \
  --candidate old/merge_row512_c16.py --candidate old/merge_row512_c16_lse2d.py --candidate old/merge_row128_c16.py \
  --candidate old/merge_row512_c8.py --candidate old/merge_row256_c16_small.py \
  --shapes full_h128_b8_l4096 full_h128_b1_l4096 tp1_b8_l4096 full_h128_b64_l4096 > $OUT/call1-bench.log 2>&1
echo "bench rc=$? $(( $(date +%s) - start ))s" >> $OUT/call1-bench.log
cp /tmp/bench/mla-template-bench.jsonl $OUT/call1-bench.jsonl; cp /tmp/bench/mla-template-bench.md $OUT/call1-bench.md
start=$(date +%s)
timeout 170 python3 benchmarks/mla_template_bench.py --out /tmp/bench2 --budget-s 130 --kernels --no-peers \
  --point min_tokens_per_split=128 --point head_block=32,min_tokens_per_split=128 \
  --point head_block=32,token_block=32,min_tokens_per_split=128 --point num_stages=3,min_tokens_per_split=128 \
  --point split_chunk=per_request,min_tokens_per_split=128 \
  --shapes full_h128_b1_l4096 full_h128_b8_l4096 > $OUT/call1-sizing.log 2>&1
echo "bench rc=$? $(( $(date +%s) - start ))s" >> $OUT/call1-sizing.log
cp /tmp/bench2/mla-template-bench.jsonl $OUT/call1-sizing.jsonl; cp /tmp/bench2/mla-template-bench.md $OUT/call1-sizing.md
start=$(date +%s)
timeout 100 ncu --clock-control none --set full -k 'regex:attention_kernel|merge' -c 2 -o /tmp/prof --force-overwrite \
  python3 benchmarks/mla_ncu.py --shapes full_h128_b1_l4096 > $OUT/call1-ncu.log 2>&1
echo "ncu rc=$? $(( $(date +%s) - start ))s" >> $OUT/call1-ncu.log
ncu -i /tmp/prof.ncu-rep --page details > $OUT/call1-ncu-details.txt 2>&1
grep -h "bench rc\|ncu rc" $OUT/*.log
grep -h -A40 "Device time per kernel" $OUT/call1-bench.log $OUT/call1-sizing.log | cut -c1-400
