# Device call 3 (after two batch-block sizes): the compile-once GPU test, the new default against specialize=shape,
# then three `ferret check`s of the honest MLA candidate (a cold gate, then two warm).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../.whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv > $OUT/gpu.txt
python3 -c "import torch, triton, sys; print(torch.__version__, triton.__version__, sys.version.split()[0])" >> $OUT/gpu.txt
timeout 150 python3 -m pytest -q -m gpu tests/tasks/mla_attention/test_compile_once_gpu.py -p no:cacheprovider > $OUT/pytest-compile-once.log 2>&1; tail -3 $OUT/pytest-compile-once.log
timeout 150 python3 benchmarks/mla_template_bench.py --out $OUT/mla-bench --budget-s 110 --rounds 5 --no-peers \
  --shapes tp1_b8_l4096 h128_b1_l4096 tp1_b64_l4096 tp8_b32_l8192 --point '' --point 'specialize=shape' 2>&1 | tail -6
rm -rf $OUT/mla-bench/points
WHL=../.whl OPS=mla_attention CHECKS=2 BUDGET_S=300 OUT=$OUT bash benchmarks/gpu_repeat_session.sh 2>&1 | tail -6
