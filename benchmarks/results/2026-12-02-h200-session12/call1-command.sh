# call 1 (session 12, snapshot of 00582cd): kernel 2 alone in launch variants; then the template points at four shapes
set -u
export PYTHONPATH=/tmp/site:$PWD FERRET_GATES_DIR=/tmp/gates PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../.whl/*.whl
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv > $OUT/call1-gpu.txt
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" >> $OUT/call1-gpu.txt
start=$(date +%s)
timeout 120 python3 benchmarks/q_prepare_probe.py --out $OUT/qp > $OUT/call1-qprepare.log 2>&1
echo "probe rc=$? $(( $(date +%s) - start ))s" >> $OUT/call1-qprepare.log
rm -rf $OUT/qp/points
start=$(date +%s)
timeout 250 python3 benchmarks/mla_template_bench.py --out $OUT/bench --shapes tp1_b64_l4096 tp1_b8_l4096 tp8_b32_l8192 h128_b64_l4096 \
  --rounds 3 --kernels --no-peers --point '' --point 'split_chunk=balanced,side_kernels=streamed,kv_loads=descriptors' \
  --point 'split_chunk=balanced,side_kernels=streamed,kv_loads=descriptors,loop_schedule=warp_specialized' \
  --point 'loop_schedule=warp_specialized' --point 'kv_loads=descriptors,loop_schedule=warp_specialized' --budget-s 200 > $OUT/call1-bench.log 2>&1
echo "bench rc=$? $(( $(date +%s) - start ))s" >> $OUT/call1-bench.log
rm -rf $OUT/bench/points
