# NOT RUN in session 31: no H200 came.
# call 4 (session 31), on an H200 after call 1 (the warm machine keeps .device-run/gates, the gate call 1's run locked):
# `ferret check` of the wgmma + pdl_all point (the contract's gate, with torch.compile of the baseline timed beside
# it), so that "never slower than torch.compile" is read on the H200 for the current template (session 24's H200
# reading, 0.86x at B=1, came before session 26's epilogue change). Then the pdl point, if time is left. Needs .whl/.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 FERRET_GATES_DIR=$PWD/.device-run/gates
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; } > $OUT/call4-gpu.txt 2>&1
cat $OUT/call4-gpu.txt
call_start=$(date +%s)
for overlap in pdl_all pdl; do
  left=$(( 570 - ($(date +%s) - call_start) ))
  [ "$left" -gt 120 ] || break
  python3 -m ferret.cli.main template render tasks/mla_attention/templates --set attention_kernel=wgmma \
    --set launch_overlap=$overlap --out /tmp/wgmma_${overlap}_mla.py >/dev/null 2>&1
  start=$(date +%s)
  timeout "$left" python3 -m ferret.cli.main check contracts/mla_attention.yaml /tmp/wgmma_${overlap}_mla.py \
    --gates-dir $FERRET_GATES_DIR --profile gpu --verdict-out $OUT/call4-verdict-$overlap.json > $OUT/call4-check-$overlap.log 2>&1
  echo "check rc=$? $(( $(date +%s) - start ))s" >> $OUT/call4-check-$overlap.log
  echo "== $overlap"; grep -E "^ferret .*(us|PASS|FAIL)|rc=" $OUT/call4-check-$overlap.log | tail -16 | cut -c1-300
done
