# call 2 (session 30), on the machine of call 1 while it is still warm: on an H100, call 1's dispatch resumed from
# /tmp/runs (its gate still in /tmp/gates), stopped at 380 s (RESUME_TIMEOUT_S); then, on either card, Nsight Compute on kernel 2 and
# cuBLAS's bmm of the same absorption at B=64 (128 heads, L=4096), cut at 120 s, unless NCU=0 (too little device time
# left). Needs .whl/, carried.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD FERRET_GATES_DIR=/tmp/gates PYTHONUNBUFFERED=1
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; ls /tmp/runs /tmp/gates; } > $OUT/call2-gpu.txt 2>&1
cat $OUT/call2-gpu.txt
if ! grep -q H200 $OUT/call2-gpu.txt; then
  RESUME_RUN=$(ls /tmp/runs | head -1) MAX_ROUNDS=3 PROPOSALS=3 DISPATCH_TIMEOUT_S=${RESUME_TIMEOUT_S:-380} bash benchmarks/gpu_dispatch.sh 2>&1 \
    | grep -E "round|final|exit|speed|PASS|FAIL|resuming|error|locked|run " | cut -c1-260 | tail -30
fi
[ "${NCU:-1}" = 0 ] && exit 0
timeout 120 ncu --clock-control none --set full --nvtx --nvtx-include "step/" --nvtx-include "absorb_bmm/" \
  -k 'regex:q_prepare|gemm|nvjet|xmma|cutlass|bf16|sm90' -c 4 -o /tmp/k2prof --force-overwrite \
  python3 benchmarks/mla_ncu.py --shapes h128_b64_l4096 --point attention_kernel=wgmma --absorb-bmm > /tmp/ncu.log 2>&1
echo "ncu rc=$?" >> /tmp/ncu.log
tail -6 /tmp/ncu.log | cut -c1-220
ncu -i /tmp/k2prof.ncu-rep --page details > $OUT/call2-ncu-details.txt 2>&1
cat /tmp/ncu.log >> $OUT/call2-ncu-details.txt
grep -E "^  [a-z_0-9]+.*\(|Duration|DRAM Throughput|Memory Throughput|Compute \(SM\)|Achieved Occupancy|Registers Per" $OUT/call2-ncu-details.txt | head -40 | cut -c1-160
