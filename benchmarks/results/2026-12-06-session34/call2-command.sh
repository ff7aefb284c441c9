# Call 2 of session 34. On an H200 first: session 22's H200 run (20261204-144628-8ad09c) resumed (round 3 and the final
# check, about 400 s). On any card: the CUDA candidates' GPU tests that call 1 did not reach (its 520 s ended after
# three: softmax, the honest CUDA MLA and the theta simplification passed), the MLA simplifications' other three left
# out (each builds an MLA gate, ~140 s): the rmsnorm CUDA candidate, NVRTC's refusal, and the cheats that use CuPy's
# streams and arrays, with ExternalStream's deprecation an error.
set -u
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; } > $OUT/gpu.txt 2>&1
cat $OUT/gpu.txt
if grep -q H200 $OUT/gpu.txt; then
  export RUNS_DIR=$PWD/.device-run/runs GATES_DIR=$PWD/.device-run/gates MAX_ROUNDS=3 PROPOSALS=3 DISPATCH_TIMEOUT_S=${DISPATCH_TIMEOUT_S:-420}
  export RESUME_TAR=benchmarks/results/2026-12-04-h200-session22/runs.tar.gz RESUME_RUN=20261204-144628-8ad09c
  bash benchmarks/gpu_dispatch.sh 2>&1 | grep -E "round|final|exit|speed|PASS|FAIL|resuming|error|locked|run " | cut -c1-260 | tail -40
fi
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD FERRET_GATES_DIR=/tmp/gates PYTHONUNBUFFERED=1
python3 -c "import torch, triton, cupy; print('torch', torch.__version__, 'triton', triton.__version__, 'cupy', cupy.__version__)" >> $OUT/gpu.txt 2>&1
t=test_cuda_candidates_gpu
timeout ${LIMIT_S:-150} python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu/$t.py -k "not simplifications and not pass_every_part" -rA --durations=0 -W "error:ExternalStream is deprecated:DeprecationWarning" > $OUT/$t.log 2>&1
echo "pytest rc=$?" >> $OUT/$t.log
echo "== $t: $(grep -c 'ExternalStream is deprecated' $OUT/$t.log) lines naming ExternalStream's deprecation"
grep -E "FAILED|ERROR|passed|failed|rc=|s call" $OUT/$t.log | tail -30 | cut -c1-240
