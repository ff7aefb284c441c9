# call 5 (session 18, snapshot in COMMIT, the code of 8ea669e: kernel 1's append shared by the rope programs of
# kernel 2, 16 rows a head): call 4 got no machine, and the device time left (374 s) no longer holds a gate check (about
# 275 s on a fresh machine plus its start). The bench (each output checked against the reference first, then each
# kernel's device time) of the default beside the candidate before the append moved (old/triton_mla_4e34f68.py, call
# 2's gate-checked one), then the paged candidate's GPU cases
set -u
export PYTHONPATH=/tmp/site:$PWD FERRET_GATES_DIR=/tmp/gates PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../.whl/*.whl
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; python3 -c "import torch, triton; print(torch.__version__, triton.__version__)"; } > $OUT/call5-gpu.txt 2>&1
start=$(date +%s)
timeout 90 python3 benchmarks/mla_template_bench.py --out /tmp/bench --budget-s 60 --kernels --no-peers --point "" \
  --candidate old/triton_mla_4e34f68.py --shapes full_h128_b64_l4096 tp8_b32_l8192 full_h128_b8_l4096 full_h128_b1_l4096 tp1_b64_l4096 > $OUT/call5-bench.log 2>&1
echo "bench rc=$? $(( $(date +%s) - start ))s" >> $OUT/call5-bench.log
cp /tmp/bench/mla-template-bench.jsonl $OUT/call5-bench.jsonl
start=$(date +%s)
timeout 60 python3 -m pytest -q -p no:cacheprovider -m gpu tests/tasks/mla_attention_paged/test_paged_gpu.py -rA > $OUT/call5-paged.log 2>&1
echo "pytest rc=$? $(( $(date +%s) - start ))s" >> $OUT/call5-paged.log
grep -h "rc=\|passed\|failed\|PASSED\|FAILED" $OUT/call5-paged.log | cut -c1-250
grep -h "ok\|rel_l2\|why" $OUT/call5-bench.log | grep -v "^- " | head -12 | cut -c1-250
grep -h -A14 "Device time per kernel" $OUT/call5-bench.log | cut -c1-330
