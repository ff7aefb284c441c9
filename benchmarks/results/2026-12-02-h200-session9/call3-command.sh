set -u
export PYTHONPATH=/tmp/site:$PWD FERRET_GATES_DIR=/tmp/gates PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../.whl/*.whl
start=$(date +%s)
left() { echo $(( 560 - ($(date +%s) - start) )); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv > $OUT/call3-gpu.txt 2>&1
# where a check's seconds before ferret's progress clock go: the imports and the CUDA context
timeout 60 python3 - > $OUT/call3-imports.txt 2>&1 <<'PY'
import time
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
torch.zeros(1, device="cuda"); torch.cuda.synchronize()
t2 = time.perf_counter()
import triton
t3 = time.perf_counter()
import ferret.gate.judge
t4 = time.perf_counter()
print(f"import torch {t1 - t0:.2f} s, CUDA context {t2 - t1:.2f} s, import triton {t3 - t2:.2f} s, import ferret.gate.judge {t4 - t3:.2f} s")
PY
echo "imports $(( $(date +%s) - start ))s" >> $OUT/call3-elapsed.txt
# issue 11: the MLA check with variants compared during the run (c28f068): a cold and two warm
python3 benchmarks/timing_repeatability.py run --ops mla_attention --checks 2 --gates-dir /tmp/gates --out $OUT \
  --budget-s 270 > $OUT/call3-repeat.log 2>&1
echo "mla checks $(( $(date +%s) - start ))s" >> $OUT/call3-elapsed.txt
# issue 13: the template's new kernel-3 axes beside the default point (no peers: FlashMLA and torch.compile were timed before)
timeout $(( $(left) - 145 )) python3 benchmarks/mla_template_bench.py --out $OUT/bench --shapes h128_b64_l4096 tp1_b8_l4096 --rounds 3 --no-peers \
  --point '' --point kv_loads=descriptors --point kv_loads=descriptors,rescale=when_max_grows --point rescale=when_max_grows \
  --point kv_loads=descriptors,token_block=32 --budget-s $(( $(left) - 195 )) > $OUT/call3-bench.log 2>&1
echo "bench $(( $(date +%s) - start ))s" >> $OUT/call3-elapsed.txt
# issue 11 section 3: softmax's third check at the settling clock (its cold check)
python3 benchmarks/timing_repeatability.py run --ops softmax --checks 0 --gates-dir /tmp/gates --out $OUT \
  --budget-s $(( $(left) )) >> $OUT/call3-repeat.log 2>&1
python3 benchmarks/timing_repeatability.py table $OUT/checks.jsonl > $OUT/call3-repeat-table.md 2>&1
mv $OUT/checks.jsonl $OUT/call3-checks.jsonl
echo "softmax check $(( $(date +%s) - start ))s" >> $OUT/call3-elapsed.txt
