# Call 2 of session 35. On an H200: session 22's H200 run resumed (session 33's next-call-command.sh). On an H100:
# tests/gpu/test_cuda_candidates_gpu.py's MLA tests (the honest CUDA MLA and the four simplifications) after they were
# made to share one project, hence one MLA gate: the logs should show one gate build.
set -u
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; } > $OUT/gpu.txt 2>&1
cat $OUT/gpu.txt
if grep -q H200 $OUT/gpu.txt; then
  exec bash benchmarks/results/2026-12-06-session33/next-call-command.sh
fi
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
timeout 560 python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu/test_cuda_candidates_gpu.py -k "mla_attention or simplifications" -rA --durations=0 -W "error:ExternalStream is deprecated:DeprecationWarning" > $OUT/mla-tests.log 2>&1
echo "pytest rc=$?"; grep -c "golden stages written" $OUT/mla-tests.log; grep -E "locked|PASSED|FAILED|passed|failed|[0-9.]+s (call|setup)" $OUT/mla-tests.log | tail -20
