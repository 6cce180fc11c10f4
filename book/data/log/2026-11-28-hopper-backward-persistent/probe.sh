#!/usr/bin/env bash
# Run 1, at 24a5c46: probe_overhead.py, then Nsight Compute on the one-pass dK/dV kernel at 4x16x2048x64 (ncu_d64.py):
# source-level stall samples and the details page.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
t0=$(date +%s)
export TORCH_EXTENSIONS_DIR=/tmp/ext_new PYTHONPATH=/tmp/site:$PWD
python3 -c 'import torch; from systems.attention.flash_cpp.hopper import unavailable; print("build:", unavailable(torch.device("cuda")))' > $OUT/build.log 2>&1
echo "built after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/build.log)"
timeout 200 python3 .gpu/probe_overhead.py > $OUT/overhead.jsonl 2> $OUT/overhead.err
echo "probe rc=$? after $(( $(date +%s) - t0 )) s"; tail -2 $OUT/overhead.err
timeout 200 ncu --kernel-name regex:dkdv --launch-skip 1 --launch-count 1 --section SourceCounters --section WarpStateStats \
  --section SpeedOfLight --section MemoryWorkloadAnalysis -f -o /tmp/src python3 .gpu/ncu_d64.py > $OUT/ncu.log 2>&1
echo "ncu rc=$? after $(( $(date +%s) - t0 )) s"
ncu -i /tmp/src.ncu-rep --page details > $OUT/ncu_details.txt 2>&1
ncu -i /tmp/src.ncu-rep --page source --csv --print-source sass > /tmp/ncu_source.csv 2>>$OUT/ncu.log
gzip -c /tmp/ncu_source.csv > $OUT/ncu_source.csv.gz
echo "done after $(( $(date +%s) - t0 )) s"
