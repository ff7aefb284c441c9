# call 1 (session 26): kernel 3's epilogue as one division a row (its machine code halved: 6608 -> 3136 instructions,
# cubin .text), against the render before it and a variant with the in-loop chunk loads not unrolled, whole steps as
# CUDA-graph replays with each kernel's device time; the split count at B<=8 through WGMMA_MIN_SPLIT_TILES 1 and 4; the
# row merge 16 splits at a time;
# the wgmma GPU tests; then the gate's check of the wgmma + pdl point as rendered now
set -u
R=benchmarks/results/2026-12-05-h100-session26
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD FERRET_GATES_DIR=/tmp/gates PYTHONUNBUFFERED=1
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; python3 -c "import torch, triton, cupy; print('torch', torch.__version__, 'triton', triton.__version__, 'cupy', cupy.__version__)"; } > $OUT/call1-gpu.txt 2>&1
cat $OUT/call1-gpu.txt
start=$(date +%s)
P=/tmp/graph/points/point_00.py
timeout 150 python3 -W ignore benchmarks/mla_step_graph_probe.py --out /tmp/graph --shapes 1:128:4096 8:128:4096 64:128:4096 --kernels \
  --point attention_kernel=wgmma,launch_overlap=pdl --file before=$R/wgmma-pdl-before-candidate.py \
  --file rolled-chunks=$R/wgmma-pdl-rolled-chunks-candidate.py \
  --file min-split-tiles-1=$P,WGMMA_MIN_SPLIT_TILES=1 --file min-split-tiles-4=$P,WGMMA_MIN_SPLIT_TILES=4 --file row-merge-16=$P,ROW_MERGE_SPLITS=16 > $OUT/call1-probe.log 2>&1
echo "probe rc=$? $(( $(date +%s) - start ))s" >> $OUT/call1-probe.log
cp /tmp/graph/step-graph-probe.jsonl $OUT/call1-step-graph-probe.jsonl 2>/dev/null
tail -18 $OUT/call1-probe.log | cut -c1-200
start=$(date +%s)
timeout 120 python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu/test_wgmma_attention_gpu.py -rA > $OUT/call1-kernel-tests.log 2>&1
echo "pytest rc=$? $(( $(date +%s) - start ))s" >> $OUT/call1-kernel-tests.log
tail -3 $OUT/call1-kernel-tests.log
python3 -m ferret.cli.main template render tasks/mla_attention/templates --set attention_kernel=wgmma --set launch_overlap=pdl --out /tmp/wgmma_pdl_mla.py 2>/dev/null
cp /tmp/wgmma_pdl_mla.py $OUT/call1-candidate.py
start=$(date +%s)
timeout 330 python3 -m ferret.cli.main check contracts/mla_attention.yaml /tmp/wgmma_pdl_mla.py --gates-dir /tmp/gates --profile gpu --verdict-out $OUT/call1-verdict.json > $OUT/call1-check.log 2>&1
echo "check rc=$? $(( $(date +%s) - start ))s" >> $OUT/call1-check.log
grep -E "^ferret .*(us|PASS|FAIL)|rc=" $OUT/call1-check.log | tail -16 | cut -c1-300
