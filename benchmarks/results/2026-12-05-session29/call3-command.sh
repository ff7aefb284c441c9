# call 3 (session 29), on whichever card comes, after call 2 could not start twice and left too little device time for
# the resumed dispatch (about 550 s): the backend's programmatic-launch test as fixed after call 1, then session 27's
# call 3 (Nsight Compute on kernel 2 beside cuBLAS's bmm of the same absorption) with its ncu limits cut to 240 + 150 s.
# Needs .whl/ (scripts/device_wheels.sh), carried.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD FERRET_GATES_DIR=/tmp/gates PYTHONUNBUFFERED=1
timeout 60 python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu/test_cuda_backend_gpu.py -rA > $OUT/call3-backend-test.log 2>&1
echo "pytest rc=$?" >> $OUT/call3-backend-test.log
grep -E "FAILED|ERROR|passed|failed|rc=" $OUT/call3-backend-test.log | tail -4 | cut -c1-240
sed -e 's/^timeout 300 ncu/timeout 240 ncu/' -e 's/^  timeout 180 ncu/  timeout 150 ncu/' \
  benchmarks/results/2026-12-05-session27/call3-command.sh > /tmp/call3.sh
bash /tmp/call3.sh
