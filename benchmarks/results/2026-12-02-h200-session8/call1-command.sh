set -u
export PYTHONPATH=/tmp/site:$PWD FERRET_GATES_DIR=/tmp/gates PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../.whl/*.whl
start=$(date +%s)
left() { echo $(( 565 - ($(date +%s) - start) )); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv > $OUT/call1-gpu.txt 2>&1
python3 -c "import torch, triton, cupy; print(torch.__version__, triton.__version__, cupy.__version__)" > $OUT/call1-versions.txt 2>&1
timeout 90 python3 -m pytest -m gpu -v -rA -p no:cacheprovider tests/gate/test_sm_clock.py tests/gpu/test_gpu_clock.py > $OUT/call1-clock-tests.log 2>&1
echo "clock tests $(( $(date +%s) - start ))s" >> $OUT/call1-elapsed.txt
# The honest candidates are timed and asserted unflagged: one at a time (they also build the rmsnorm and MLA gates).
timeout 330 python3 -m pytest -m gpu -v -rA --durations=0 -p no:cacheprovider tests/gpu/test_cuda_candidates_gpu.py -k honest > $OUT/call1-cuda-honest.log 2>&1
echo "honest $(( $(date +%s) - start ))s" >> $OUT/call1-elapsed.txt
# The rest (simplifications, compile error, adversarial candidates) in 4 workers.
timeout $(left) python3 -m pytest -m gpu -v -rA --durations=0 -n 4 -p no:cacheprovider tests/gpu/test_cuda_candidates_gpu.py -k "not honest" > $OUT/call1-cuda-rest.log 2>&1
echo "rest $(( $(date +%s) - start ))s" >> $OUT/call1-elapsed.txt
