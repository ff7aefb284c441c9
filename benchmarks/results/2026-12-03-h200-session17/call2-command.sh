# call 2 (session 17, snapshot of a2e8281): the ATen watch no longer imports torch._dynamo itself. On the GPU: the
# timing-guard tests (the candidate timer's ATen watch) and the honest rmsnorm, softmax and rope gates (the runner's
# watch on the first call), one pytest worker
set -u
export PYTHONPATH=/tmp/site:$PWD FERRET_GATES_DIR=/tmp/gates PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../.whl/*.whl
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/call2-gpu.txt
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" >> $OUT/call2-gpu.txt
start=$(date +%s)
timeout 520 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_gpu_timing_guards.py tests/gpu/test_gpu_gates.py -k "timing_guards or (honest and not mla)" -rA > $OUT/call2-gpu-tests.log 2>&1
echo "pytest rc=$? $(( $(date +%s) - start ))s" >> $OUT/call2-gpu-tests.log
grep -h "rc=\|passed\|failed\|PASSED\|FAILED\|ERROR" $OUT/call2-gpu-tests.log | cut -c1-250
