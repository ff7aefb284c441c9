set -u
export PYTHONPATH=/tmp/site:$PWD FERRET_GATES_DIR=/tmp/gates PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../.whl/*.whl
start=$(date +%s)
left() { echo $(( 575 - ($(date +%s) - start) )); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv > $OUT/call2-gpu.txt 2>&1
# early-runner-2: a cold and two warm MLA checks (issue 11 section 4's warm time with the early runner)
python3 benchmarks/timing_repeatability.py run --ops mla_attention --checks 2 --gates-dir /tmp/gates --out $OUT \
  --budget-s 270 > $OUT/call2-repeat.log 2>&1
python3 benchmarks/timing_repeatability.py table $OUT/checks.jsonl > $OUT/call2-repeat-table.md 2>&1
mv $OUT/checks.jsonl $OUT/call2-checks.jsonl
echo "checks $(( $(date +%s) - start ))s" >> $OUT/call2-elapsed.txt
# the CUDA file's non-honest tests (simplifications, NVRTC refusal, six adversarial candidates) in 4 workers
timeout $(( $(left) - 60 )) python3 -m pytest -m gpu -v -rA --durations=0 -n 4 -p no:cacheprovider tests/gpu/test_cuda_candidates_gpu.py -k "not honest" > $OUT/call2-cuda-rest.log 2>&1
echo "rest $(( $(date +%s) - start ))s" >> $OUT/call2-elapsed.txt
timeout $(left) python3 -m pytest -m gpu -v -rA --durations=0 -p no:cacheprovider tests/gpu/test_cuda_candidates_gpu.py -k "honest_cuda_rmsnorm" > $OUT/call2-cuda-honest.log 2>&1
echo "honest rmsnorm $(( $(date +%s) - start ))s" >> $OUT/call2-elapsed.txt
