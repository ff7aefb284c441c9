set -u
export PYTHONPATH=/tmp/site:$PWD FERRET_GATES_DIR=/tmp/gates PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../.whl/*.whl
start=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv > $OUT/call2-gpu.txt 2>&1
timeout 130 python3 benchmarks/placement_probe.py --processes 4 --pools 6 --out $OUT > $OUT/call2-placement.log 2>&1
echo "probe rc=$? $(( $(date +%s) - start ))s" >> $OUT/call2-elapsed.txt
F=tests/gpu/test_cuda_candidates_gpu.py
timeout 150 python3 -m pytest -m gpu -v --durations=0 -p no:cacheprovider \
  "$F::test_a_kernel_moved_to_a_cupy_stream_once_timed_is_named_by_the_scan_and_caught_by_the_wall_clock" \
  "$F::test_a_weight_multiply_by_cupy_array_operations_is_library_compute_seen_by_the_profiler" > $OUT/call2-tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - start ))s" >> $OUT/call2-elapsed.txt
left=$(( 565 - ($(date +%s) - start) ))
python3 benchmarks/timing_repeatability.py run --ops mla_attention --checks 2 --gates-dir /tmp/gates --out $OUT \
  --budget-s $left > $OUT/call2-repeat.log 2>&1
python3 benchmarks/timing_repeatability.py table $OUT/checks.jsonl > $OUT/call2-repeat-table.md 2>&1
echo "total $(( $(date +%s) - start ))s" >> $OUT/call2-elapsed.txt
