# Device call 1 (run from a `git archive` snapshot in .snap, wheels in ../.whl): the compile-once GPU test, then four
# template points side by side (the new default, specialize=shape = the old default, the 64-head point and the
# 64-head point with few_tiles=default_point).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../.whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv > $OUT/gpu.txt
python3 -c "import torch, triton, sys; print(torch.__version__, triton.__version__, sys.version.split()[0])" >> $OUT/gpu.txt
timeout 200 python3 -m pytest -q -m gpu tests/tasks/mla_attention/test_compile_once_gpu.py -p no:cacheprovider > $OUT/pytest-compile-once.log 2>&1; tail -3 $OUT/pytest-compile-once.log
W="head_block=64,num_warps=8,programs_per_sm=1,split_policy=waves,token_block=64"
timeout 300 python3 benchmarks/mla_template_bench.py --out $OUT/mla-bench --budget-s 230 --rounds 5 \
  --shapes tp1_b64_l4096 tp1_b8_l4096 tp8_b32_l8192 h128_b1_l4096 h128_b64_l4096 \
  --point '' --point 'specialize=shape' --point "$W" --point "$W,few_tiles=default_point" 2>&1 | tail -3
rm -rf $OUT/mla-bench/points
