# NOT RUN: prepared in session 28 (no device time) for after calls 1 and 2. Needs .whl/ (scripts/device_wheels.sh),
# carried; Nsight Compute (ncu) is on the image (session 15 used it).
# call 3: why kernel 2 (q_prepare, the absorption q_nope @ W_UK and the rope of q_pe) takes about twice cuBLAS's time
# for the same product at B >= 64 (H200, sessions 12 and 20: 26.3 us at B=64 and 40.2 at B=128 against torch.bmm's
# 13.3 at B=64). Nsight Compute's full set on kernel 2 of the wgmma point (the committed candidate's kernel 2) and on
# cuBLAS's bmm of the same absorption, each launched once per shape inside its own NVTX range (benchmarks/mla_ncu.py
# --absorb-bmm), at 128 heads, L=4096, B=64 and B=128, then the same at B=8
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD FERRET_GATES_DIR=/tmp/gates PYTHONUNBUFFERED=1
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; which ncu; ncu --version; } > $OUT/call3-gpu.txt 2>&1
cat $OUT/call3-gpu.txt
start=$(date +%s)
timeout 300 ncu --clock-control none --set full --nvtx --nvtx-include "step/" --nvtx-include "absorb_bmm/" \
  -k 'regex:q_prepare|gemm|nvjet|xmma|cutlass' -c 12 -o /tmp/k2prof --force-overwrite \
  python3 benchmarks/mla_ncu.py --shapes h128_b64_l4096 h128_b128_l4096 h128_b8_l4096 --point attention_kernel=wgmma \
  --absorb-bmm > $OUT/call3-ncu.log 2>&1
echo "ncu rc=$? $(( $(date +%s) - start ))s" >> $OUT/call3-ncu.log
# the NVTX filter's syntax for push/pop ranges ("name/") was not tried on this ncu: if it let no kernel through, the
# same run filtered by kernel names alone (the reference's GEMMs are float64, cuBLAS's names for them carry no bf16)
if grep -q "No kernels were profiled" $OUT/call3-ncu.log; then
  start=$(date +%s)
  timeout 180 ncu --clock-control none --set full -k 'regex:q_prepare|bf16|nvjet' -c 12 -o /tmp/k2prof --force-overwrite \
    python3 benchmarks/mla_ncu.py --shapes h128_b64_l4096 h128_b128_l4096 --point attention_kernel=wgmma --absorb-bmm \
    > $OUT/call3-ncu-by-name.log 2>&1
  echo "ncu rc=$? $(( $(date +%s) - start ))s" >> $OUT/call3-ncu-by-name.log
  tail -12 $OUT/call3-ncu-by-name.log | cut -c1-220
fi
tail -12 $OUT/call3-ncu.log | cut -c1-220
ncu -i /tmp/k2prof.ncu-rep --page details > $OUT/call3-ncu-details.txt 2>&1
ncu -i /tmp/k2prof.ncu-rep --page raw --csv > /tmp/raw.csv 2>&1; python3 - <<'PY' > $OUT/call3-ncu-metrics.csv
import csv
rows = list(csv.reader(open("/tmp/raw.csv")))
keep = [i for i, name in enumerate(rows[0]) if i < 12 or any(k in name for k in ("stall", "pipe_tensor", "throughput", "occupancy", "registers", "dram__bytes", "lts__t_sector_hit", "gpu__time_duration", "warps_active", "inst_executed_pipe", "shared_mem"))]
for row in rows:
    print(",".join('"%s"' % row[i].replace('"', "'") for i in keep if i < len(row)))
PY
grep -E "^  [a-z_0-9]+.*\(|Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Registers Per" $OUT/call3-ncu-details.txt | head -60 | cut -c1-160
