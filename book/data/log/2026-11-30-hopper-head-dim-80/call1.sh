#!/usr/bin/env bash
set -u
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv > $OUT/machine.txt
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" >> $OUT/machine.txt
PYTHONPATH=$PWD timeout 400 python3 .gpu/d80_spike.py > $OUT/spike.jsonl 2> $OUT/spike.err
echo rc=$?; cat $OUT/spike.jsonl; tail -5 $OUT/spike.err
