#!/bin/bash
# batch 1: all runs sequential, niced, one process at a time
cd "$(dirname "$0")"
P="nice -n 19 ../../../.venv/bin/python runexp.py"
while read -r args; do
  [ -z "$args" ] && continue
  $P $args >> batch1.jsonl 2>> batch1.err
done <<'LIST'
16
32
64
128
32 beta=0
64 beta=0
128 beta=0
16 alpha=0
16 beta=2e-3
32 beta=5e-4
64 beta=2.5e-4
128 beta=1.25e-4
32 lr=1e-5
32 lr=1e-3
32 target=-1
64 target=-1
16 lip=meanbits
32 lip=meanbits
64 lip=meanbits
128 lip=meanbits
16 lsim=sumj
32 lsim=sumj
64 lsim=sumj
128 lsim=sumj
16 seed=1
32 seed=1
LIST
echo done >> batch1.err
