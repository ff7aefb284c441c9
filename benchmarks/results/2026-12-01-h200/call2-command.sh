set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../.whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu,power.draw --format=csv > $OUT/gpu.txt
date -u >> $OUT/gpu.txt
timeout 90 python3 benchmarks/mla_cancelling_probe.py --device cuda --dims 1,2,512 1,16,4096 2,128,4096 8,128,4096 --variants partial_bf16,one_split > $OUT/cancelling-probe.log 2>&1; tail -12 $OUT/cancelling-probe.log
FERRET_GATES_DIR=/tmp/gates timeout 470 python3 -m pytest -q -m gpu "tests/gpu/test_gpu_gates.py::test_honest_candidate_passes_at_production_shapes[rmsnorm]" "tests/gpu/test_gpu_gates.py::test_honest_candidate_passes_at_production_shapes[softmax]" "tests/gpu/test_gpu_gates.py::test_honest_candidate_passes_at_production_shapes[rope]" tests/gpu/test_gpu_clock.py tests/gpu/test_gpu_faults.py -p no:cacheprovider -rA > $OUT/pytest-gpu-honest.log 2>&1; tail -8 $OUT/pytest-gpu-honest.log
