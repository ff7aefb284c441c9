# RUN twice in session 31, on H100s: FRESH=0 at 05:00 UTC (that is call3-command.sh), then FRESH=1 DISPATCH_TIMEOUT_S=470 at 05:10.
# call 1 (session 31): the offline loop judges the wgmma, wgmma + pdl and wgmma + pdl_all starts.
# On an H200: session 22's H200 run resumed (its round 3 proposes those three starts; a resume refuses another card).
# On an H100: a fresh run of contracts/mla_attention.yaml (round 1 the default, round 2 starts[0..2], round 3 the
# three wgmma starts), cut at DISPATCH_TIMEOUT_S; its runs and gates stay in .device-run/ (ignored), which the warm
# machine keeps, and call2-command.sh resumes it at once; with FRESH=0 (too little device time left for two calls),
# call3-command.sh (kernel 2's probe) instead; with FRESH=skip, nothing. Needs .whl/ (scripts/device_wheels.sh), carried.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } > $OUT/call1-gpu.txt 2>&1
cat $OUT/call1-gpu.txt
export RUNS_DIR=$PWD/.device-run/runs GATES_DIR=$PWD/.device-run/gates MAX_ROUNDS=3 PROPOSALS=3 DISPATCH_TIMEOUT_S=${DISPATCH_TIMEOUT_S:-540}
if grep -q H200 $OUT/call1-gpu.txt; then
  export RESUME_TAR=benchmarks/results/2026-12-04-h200-session22/runs.tar.gz RESUME_RUN=20261204-144628-8ad09c
elif [ "${FRESH:-1}" = skip ]; then
  echo "not an H200 and FRESH=skip: nothing run"; exit 0
elif [ "${FRESH:-1}" = 1 ]; then
  export CONTRACT=contracts/mla_attention.yaml
else
  bash benchmarks/results/2026-12-06-session31/call3-command.sh
  exit
fi
bash benchmarks/gpu_dispatch.sh 2>&1 | grep -E "round|final|exit|speed|PASS|FAIL|resuming|error|locked|run " | cut -c1-260 | tail -40
ls $RUNS_DIR
