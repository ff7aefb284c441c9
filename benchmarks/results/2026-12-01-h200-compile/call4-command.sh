# Device call 4 (every later case warmed up ahead): the GPU timing guards after the judge's timing changes, then a
# cold and a warm `ferret check` of the honest MLA candidate.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../.whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv > $OUT/gpu.txt
FERRET_GATES_DIR=/tmp/gates timeout 290 python3 -m pytest -q -m gpu tests/gpu/test_gpu_timing_guards.py -p no:cacheprovider > $OUT/pytest-guards.log 2>&1; tail -4 $OUT/pytest-guards.log
WHL=../.whl OPS=mla_attention CHECKS=1 BUDGET_S=250 OUT=$OUT bash benchmarks/gpu_repeat_session.sh 2>&1 | tail -4
