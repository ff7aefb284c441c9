# call 1 (session 15, snapshot c8fc26b): Nsight Compute on the attention kernel, the merge and FlashMLA's core
# (full_h128 B=64 and B=8), then the bench at the full-length h128 shapes: the default (then the 128-column merge) beside
# the committed candidate before it (old/triton_mla_before.py, e96148f's) and two split sizes, with each kernel's
# device time
set -u
export PYTHONPATH=/tmp/site:$PWD FERRET_GATES_DIR=/tmp/gates PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../.whl/*.whl
{ date -u; nvidia-smi; python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; which ncu; ncu --version; } > $OUT/call1-gpu.txt 2>&1
start=$(date +%s)
timeout 300 ncu --clock-control none --set full -k 'regex:attention_kernel|merge_splits|mla' -c 12 -o /tmp/prof --force-overwrite \
  python3 benchmarks/mla_ncu.py --shapes full_h128_b64_l4096 full_h128_b8_l4096 --candidate old/triton_mla_before.py > $OUT/call1-ncu.log 2>&1
echo "ncu rc=$? $(( $(date +%s) - start ))s" >> $OUT/call1-ncu.log
ncu -i /tmp/prof.ncu-rep --page details > $OUT/call1-ncu-details.txt 2>&1
ncu -i /tmp/prof.ncu-rep --page raw --csv > /tmp/raw.csv 2>&1; python3 - <<'PY' > $OUT/call1-ncu-metrics.csv
import csv
rows = list(csv.reader(open("/tmp/raw.csv")))
keep = [i for i, name in enumerate(rows[0]) if i < 12 or any(k in name for k in ("stall", "pipe_tensor", "throughput", "occupancy", "registers", "dram__bytes", "lts__t_sector_hit", "gpu__time_duration", "warps_active", "inst_executed_pipe"))]
for row in rows:
    print(",".join('"%s"' % row[i].replace('"', "'") for i in keep if i < len(row)))
PY
ls -la /tmp/prof.ncu-rep >> $OUT/call1-ncu.log; cp /tmp/prof.ncu-rep $OUT/call1-prof.ncu-rep
start=$(date +%s)
timeout 330 python3 benchmarks/mla_template_bench.py --out /tmp/bench --budget-s 230 --kernels --point "" --point min_tokens_per_split=128 --point min_tokens_per_split=128,token_block=32 --candidate old/triton_mla_before.py --shapes full_h128_b1_l4096 full_h128_b8_l4096 tp1_b8_l4096 full_h128_b64_l4096 > $OUT/call1-bench.log 2>&1
echo "bench rc=$? $(( $(date +%s) - start ))s" >> $OUT/call1-bench.log
cp /tmp/bench/mla-template-bench.jsonl $OUT/call1-bench.jsonl; cp /tmp/bench/mla-template-bench.md $OUT/call1-bench.md
