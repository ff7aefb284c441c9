# Call 1 of session 35. On an H200: session 22's H200 run resumed (session 33's next-call-command.sh). On an H100:
# the CUDA MLA head_sum simplification test (not reached in session 34), then kernel 2's forms timed with cuBLAS's
# bmm now checked before it is timed (benchmarks/q_prepare_repeat.py, 3 rounds).
set -u
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; } > $OUT/gpu.txt 2>&1
cat $OUT/gpu.txt
if grep -q H200 $OUT/gpu.txt; then
  exec bash benchmarks/results/2026-12-06-session33/next-call-command.sh
fi
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
timeout 330 python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu/test_cuda_candidates_gpu.py -k head_sum -rA --durations=0 -W "error:ExternalStream is deprecated:DeprecationWarning" > $OUT/head_sum.log 2>&1
echo "head_sum rc=$?"; tail -5 $OUT/head_sum.log
timeout 220 python3 benchmarks/q_prepare_repeat.py --out $OUT --rounds 3 --shapes 64:128,128:128 > $OUT/repeat.log 2>&1
echo "repeat rc=$?"; tail -12 $OUT/repeat.log
