# call 5 (session 20): the CUDA candidate tests session 19's call 7 did not reach (compiled for sm_90a), in the
# device time left; the honest rmsnorm and the simplifications are left out (call 7's honest rmsnorm ran past 520 s)
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD FERRET_GATES_DIR=/tmp/gates PYTHONUNBUFFERED=1
date -u > $OUT/call5-gpu.txt
timeout 230 python3 -m pytest -v -p no:cacheprovider -m gpu tests/gpu/test_cuda_candidates_gpu.py -k "not honest and not simplifications" -rA > $OUT/call5-cuda-tests.log 2>&1
echo "pytest rc=$?" >> $OUT/call5-cuda-tests.log
grep -h "PASSED\|FAILED\|ERROR\|rc=\|passed\|failed" $OUT/call5-cuda-tests.log | cut -c1-200 | tail -15
