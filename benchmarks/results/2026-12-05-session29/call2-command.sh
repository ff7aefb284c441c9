# SUPERSEDED by ../2026-12-06-session30/call1-command.sh: session 30 ran the backend test and the profile there;
# the H200 resume is that file's H200 branch.
# NOT RUN: after call 1, three starts of a machine failed (this session's device time went to them); prepared for the
# next session's first call.
# call 2 (session 29): first the backend's programmatic-launch test as fixed after call 1 (a warm-up pair before the pair
# looked at, a 10 ms spin), then by the card that came: on an H200, session 27's call 2 (session 22's H200 dispatch
# resumed: round 3 judges the wgmma, wgmma + pdl and wgmma + pdl_all starts); on any other card, session 27's call 3
# (Nsight Compute on kernel 2 beside cuBLAS's bmm), so that no round of an H200 run is judged on another card.
# Needs .whl/ (scripts/device_wheels.sh), carried.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD FERRET_GATES_DIR=/tmp/gates PYTHONUNBUFFERED=1
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; } > $OUT/call2-gpu.txt 2>&1
cat $OUT/call2-gpu.txt
timeout 60 python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu/test_cuda_backend_gpu.py -rA > $OUT/call2-backend-test.log 2>&1
echo "pytest rc=$?" >> $OUT/call2-backend-test.log
grep -E "FAILED|ERROR|passed|failed|rc=" $OUT/call2-backend-test.log | tail -4 | cut -c1-240
if grep -q H200 $OUT/call2-gpu.txt; then
  bash benchmarks/results/2026-12-05-session27/call2-command.sh
else
  bash benchmarks/results/2026-12-05-session27/call3-command.sh
fi
