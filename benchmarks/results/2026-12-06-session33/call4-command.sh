# Call 4 of session 33. On an H200: call 1's H200 branch. On an H100: session 32's H100 run (20261206-051045-d59944,
# three rounds and a final check done) resumed for a fourth round of three (MAX_ROUNDS=4, within the contract's 8): the
# search proposes the start it has not judged, pdl_all with kernel 2 in pipelined K-blocks (q_prepare=k_blocks), then
# two one-step neighbours of its best (tests/tasks/mla_attention/test_prepared_resumes.py pins this), and the final
# check judges the run's best again, torch.compile beside it. Needs .whl/ (scripts/device_wheels.sh), carried.
set -u
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; } > $OUT/gpu.txt 2>&1
cat $OUT/gpu.txt
if grep -q H200 $OUT/gpu.txt; then
  exec bash benchmarks/results/2026-12-06-session33/call1-command.sh
fi
export MAX_ROUNDS=4 PROPOSALS=3 DISPATCH_TIMEOUT_S=${DISPATCH_TIMEOUT_S:-560}
export RESUME_TAR=benchmarks/results/2026-12-06-session32/call2-runs.tar.gz RESUME_RUN=20261206-051045-d59944
bash benchmarks/gpu_dispatch.sh 2>&1 | grep -E "round|final|exit|speed|PASS|FAIL|resuming|error|locked|run |gate" | cut -c1-260 | tail -40
