#!/usr/bin/env bash
# Session 2026-12-01 (05:xx UTC) call 1: three checks (one cold, two warm) of rmsnorm, rope, softmax on one commit.
WHL=../.whl OPS="rmsnorm rope softmax" CHECKS=2 BUDGET_S=560 OUT=$OUT bash benchmarks/gpu_repeat_session.sh
