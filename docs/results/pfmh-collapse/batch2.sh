#!/bin/bash
cd "$(dirname "$0")"
PY="nice -n 19 ../../../.venv/bin/python"
for args in "32 init=zerobias" "64 init=zerobias" "32 lsim=sumj seed=1" "128 lsim=sumj seed=1" "32 lip=meanbits seed=1"; do
  $PY runexp.py $args >> batch2.jsonl 2>> batch2.err
done
for args in "16" "16 fix" "32" "32 fix" "64" "64 fix"; do
  $PY e4_centralized.py $args >> e4.jsonl 2>> batch2.err
done
echo done >> batch2.err
