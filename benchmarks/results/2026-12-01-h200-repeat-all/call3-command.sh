#!/usr/bin/env bash
# Session 2026-12-01 call 3: the host's topology, then three checks of the paged MLA contract (the reference timer's
# fix, 5493c02) and of MLA on one commit.
set -u
{ lscpu | grep -iE 'model name|^cpu\(s\)|numa|socket'; nvidia-smi topo -m; cat /sys/bus/pci/devices/*/numa_node 2>/dev/null | sort | uniq -c; } > $OUT/topology.txt 2>&1
WHL=../.whl OPS="mla_attention_paged mla_attention" CHECKS=2 BUDGET_S=535 OUT=$OUT bash benchmarks/gpu_repeat_session.sh
