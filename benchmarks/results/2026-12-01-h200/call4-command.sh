set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../.whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
date -u > $OUT/gpu.txt
W="head_block=64,num_warps=8,programs_per_sm=1,split_policy=waves,token_block=64"
timeout 130 python3 benchmarks/mla_template_bench.py --out $OUT/mla-bench --budget-s 90 --rounds 3 --kernels --no-peers \
  --shapes tp1_b8_l4096 h128_b1_l4096 --point '' --point "$W,few_tiles=default_point" --point "$W" 2>&1 | tail -12
rm -rf $OUT/mla-bench/points
date -u >> $OUT/gpu.txt
timeout 390 python3 benchmarks/roofline_sweep.py --ops rope mla_attention --out $OUT/sweep --budget-s 300 > $OUT/sweep.log 2>&1; tail -30 $OUT/sweep.log
date -u >> $OUT/gpu.txt
