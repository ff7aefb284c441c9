set -u
export PYTHONPATH=/tmp/site:$PWD FERRET_GATES_DIR=/tmp/gates PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../.whl/*.whl
start=$(date +%s)
timeout 50 python3 -m pytest -m gpu -v -rA --durations=0 -p no:cacheprovider tests/gpu/test_gpu_timing_guards.py -k "test_honest_candidate_is_timed_without_a_flag" > $OUT/call5-guards-honest.log 2>&1
echo "honest $(( $(date +%s) - start ))s" >> $OUT/call5-elapsed.txt
timeout $(( 140 - ($(date +%s) - start) )) python3 -m pytest -m gpu -v -rA --durations=0 -n 4 -p no:cacheprovider tests/gpu/test_gpu_timing_guards.py -k "not honest" > $OUT/call5-guards-cheats.log 2>&1
echo "cheats $(( $(date +%s) - start ))s" >> $OUT/call5-elapsed.txt
