set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../.whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
W="head_block=64,num_warps=8,programs_per_sm=1,split_policy=waves"
timeout 170 python3 benchmarks/mla_template_bench.py --out $OUT/mla-bench --budget-s 120 \
  --shapes tp1_b64_l4096 tp1_b8_l4096 tp8_b32_l8192 h128_b8_l4096 \
  --point '' --point "$W,token_block=64" \
  --point "$W,token_block=64,side_kernels=streamed,small_token_block=16" \
  --point "$W,token_block=64,side_kernels=streamed" \
  --point "$W,token_block=16,value_split=2,num_stages=3,head_pad=64,side_kernels=streamed" \
  --point "$W,token_block=64,small_token_block=16" \
  --point "side_kernels=streamed" 2>&1 | tail -4
rm -rf $OUT/mla-bench/points
FERRET_GATES_DIR=/tmp/gates timeout 200 python3 -m pytest -q -m gpu tests/gpu/test_gpu_timing_guards.py tests/gpu/test_gpu_clock.py -p no:cacheprovider > $OUT/pytest-gpu.log 2>&1; tail -4 $OUT/pytest-gpu.log
