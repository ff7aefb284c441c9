set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../.whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv > $OUT/gpu.txt
python3 -c "import torch, triton, sys; print(torch.__version__, triton.__version__, sys.version.split()[0])" >> $OUT/gpu.txt
W="head_block=64,num_warps=8,programs_per_sm=1,split_policy=waves,token_block=64"
timeout 260 python3 benchmarks/mla_template_bench.py --out $OUT/mla-bench --budget-s 200 --rounds 5 \
  --shapes tp1_b64_l4096 tp1_b8_l4096 tp8_b32_l8192 h128_b8_l4096 h128_b64_l4096 h128_b1_l4096 \
  --point '' --point "$W,few_tiles=default_point" --point "$W" 2>&1 | tail -3
rm -rf $OUT/mla-bench/points
FERRET_GATES_DIR=/tmp/gates timeout 300 python3 -m pytest -q -m gpu tests/gpu/test_gpu_timing_guards.py -p no:cacheprovider > $OUT/pytest-guards.log 2>&1; tail -4 $OUT/pytest-guards.log
