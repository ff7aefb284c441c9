set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../.whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 FERRET_GATES_DIR=/tmp/gates
date -u > $OUT/gpu.txt; nvidia-smi --query-gpu=name,driver_version --format=csv >> $OUT/gpu.txt
T=tests/gpu/test_gpu_gates.py
timeout 300 python3 -m pytest -q -m gpu "$T::test_honest_candidate_passes_at_production_shapes[mla_attention]" -p no:cacheprovider -rA > $OUT/pytest-gpu-mla-honest.log 2>&1; tail -3 $OUT/pytest-gpu-mla-honest.log
date -u >> $OUT/gpu.txt
# no timing in these five: they share the GPU, each in its own process, on the gate the honest check built
pids=""
for t in "$T::test_mla_bf16_partials_fail_on_the_gpu_cancelling_case" "$T::test_mla_simplifications_fail_at_production_shapes[theta]" "$T::test_mla_simplifications_fail_at_production_shapes[scale]" "$T::test_mla_simplifications_fail_at_production_shapes[no_kv_norm]" "$T::test_mla_simplifications_fail_at_production_shapes[head_sum]"; do
  name=$(echo "$t" | sed 's/.*:://; s/[^A-Za-z0-9_]/_/g')
  timeout 270 python3 -m pytest -q -m gpu "$t" -p no:cacheprovider -rA > $OUT/pytest-$name.log 2>&1 &
  pids="$pids $!"
done
wait $pids
date -u >> $OUT/gpu.txt
tail -q -n 2 $OUT/pytest-test_mla_*.log
