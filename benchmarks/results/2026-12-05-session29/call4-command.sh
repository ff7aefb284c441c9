# SUPERSEDED by ../2026-12-06-session30/call1-command.sh: session 30 ran the backend test and the profile there;
# the H200 resume is that file's H200 branch.
# NOT RUN: with 308 s left, the device tool refused a start (too little time for one).
# call 4 (session 29), for about 5 minutes of device time: the backend's
# programmatic-launch test as fixed after call 1, then Nsight Compute on kernel 2 and cuBLAS's bmm at B=64 only
# (128 heads, L=4096), cut at 120 s. Needs .whl/ (scripts/device_wheels.sh), carried.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD FERRET_GATES_DIR=/tmp/gates PYTHONUNBUFFERED=1
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; } > $OUT/call4-gpu.txt 2>&1
cat $OUT/call4-gpu.txt
timeout 60 python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu/test_cuda_backend_gpu.py -rA > $OUT/call4-backend-test.log 2>&1
echo "pytest rc=$?" >> $OUT/call4-backend-test.log
grep -E "FAILED|ERROR|passed|failed|rc=" $OUT/call4-backend-test.log | tail -4 | cut -c1-240
timeout 120 ncu --clock-control none --set full --nvtx --nvtx-include "step/" --nvtx-include "absorb_bmm/" \
  -k 'regex:q_prepare|gemm|nvjet|xmma|cutlass|bf16|sm90' -c 4 -o /tmp/k2prof --force-overwrite \
  python3 benchmarks/mla_ncu.py --shapes h128_b64_l4096 --point attention_kernel=wgmma --absorb-bmm > $OUT/call4-ncu.log 2>&1
echo "ncu rc=$?" >> $OUT/call4-ncu.log
tail -6 $OUT/call4-ncu.log | cut -c1-220
ncu -i /tmp/k2prof.ncu-rep --page details > $OUT/call4-ncu-details.txt 2>&1
grep -E "^  [a-z_0-9]+.*\(|Duration|DRAM Throughput|Memory Throughput|Compute \(SM\)|Achieved Occupancy|Registers Per" $OUT/call4-ncu-details.txt | head -40 | cut -c1-160
