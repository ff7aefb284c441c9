# call 1 (session 30): first the backend's programmatic-launch test as fixed in session 29 (a warm-up pair before the
# pair looked at, a 10 ms spin). Then, on an H200, session 22's H200 dispatch resumed (round 3 judges the wgmma,
# wgmma + pdl and wgmma + pdl_all starts; session 27's call 2, stopped at DISPATCH_TIMEOUT_S, 500 s unless set; RESUME=0
# profiles instead, for too little device time). On an H100 (a fresh loop run
# there needs two calls, more device time than was left), profile-kernels.sh: Nsight Compute on kernel 2, the wgmma
# kernel 3, FlashMLA and cuBLAS's bmm at B=64 and 128. Needs .whl/ (scripts/device_wheels.sh), carried.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD FERRET_GATES_DIR=/tmp/gates PYTHONUNBUFFERED=1
here=benchmarks/results/2026-12-06-session30
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; ncu --version | tail -1; } > $OUT/call1-gpu.txt 2>&1
cat $OUT/call1-gpu.txt
timeout 60 python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu/test_cuda_backend_gpu.py -rA > $OUT/call1-backend-test.log 2>&1
echo "pytest rc=$?" >> $OUT/call1-backend-test.log
grep -E "FAILED|ERROR|passed|failed|rc=" $OUT/call1-backend-test.log | tail -4 | cut -c1-240
if grep -q H200 $OUT/call1-gpu.txt && [ "${RESUME:-1}" = 1 ]; then
  cp benchmarks/results/2026-12-04-h200-session22/runs.tar.gz /tmp/runs22.tar.gz
  RESUME_TAR=/tmp/runs22.tar.gz RESUME_RUN=20261204-144628-8ad09c MAX_ROUNDS=3 PROPOSALS=3 DISPATCH_TIMEOUT_S=${DISPATCH_TIMEOUT_S:-500} \
    bash benchmarks/gpu_dispatch.sh 2>&1 | grep -E "round|final|exit|speed|PASS|FAIL|resuming|error|locked|run " \
    | cut -c1-260 | tail -40
else
  bash $here/profile-kernels.sh call1
fi
