# Call 4 of session 34 (the last device time, about 630 s). On an H200: session 22's H200 run (20261204-144628-8ad09c)
# resumed (round 3 and the final check; cut at 480 s, it stays resumable). On any other card: the last three tests of
# tests/gpu/test_cuda_candidates_gpu.py that calls 1-3 did not reach, the MLA simplifications in CUDA (scale,
# no_kv_norm, head_sum; each builds an MLA gate), with ExternalStream's deprecation an error.
set -u
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; } > $OUT/gpu.txt 2>&1
cat $OUT/gpu.txt
if grep -q H200 $OUT/gpu.txt; then
  export RUNS_DIR=$PWD/.device-run/runs GATES_DIR=$PWD/.device-run/gates MAX_ROUNDS=3 PROPOSALS=3 DISPATCH_TIMEOUT_S=${DISPATCH_TIMEOUT_S:-480}
  export RESUME_TAR=benchmarks/results/2026-12-04-h200-session22/runs.tar.gz RESUME_RUN=20261204-144628-8ad09c
  bash benchmarks/gpu_dispatch.sh 2>&1 | grep -E "round|final|exit|speed|PASS|FAIL|resuming|error|locked|run " | cut -c1-260 | tail -40
  exit 0
fi
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD FERRET_GATES_DIR=/tmp/gates PYTHONUNBUFFERED=1
python3 -c "import torch, triton, cupy; print('torch', torch.__version__, 'triton', triton.__version__, 'cupy', cupy.__version__)" >> $OUT/gpu.txt 2>&1
t=test_cuda_candidates_gpu
timeout ${LIMIT_S:-500} python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu/$t.py -k "simplifications and not theta" -rA --durations=0 -W "error:ExternalStream is deprecated:DeprecationWarning" > $OUT/$t.log 2>&1
echo "pytest rc=$?" >> $OUT/$t.log
echo "== $t: $(grep -c 'ExternalStream is deprecated' $OUT/$t.log) lines naming ExternalStream's deprecation"
grep -E "FAILED|ERROR|passed|failed|rc=|s call" $OUT/$t.log | tail -12 | cut -c1-240
