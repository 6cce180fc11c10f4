#!/usr/bin/env bash
# Per-SASS-instruction stall samples of the first kernel matching $KERNELS (flash_cuda's, which ncu_mix.py runs first)
# at the leaderboard shape, into $OUT/ncu_source_$TAG.csv.
set -u
export PYTHONPATH=$PWD
timeout 240 ncu --kernel-name regex:"${KERNELS:-dkdv}" --launch-count 1 --section SourceCounters --section WarpStateStats \
  --section SpeedOfLight -f -o /tmp/src_$TAG python3 .gpu/ncu_mix.py > $OUT/ncu_source_$TAG.log 2>&1
echo "ncu rc=$?"
ncu -i /tmp/src_$TAG.ncu-rep --page source --csv --print-source sass > $OUT/ncu_source_$TAG.csv 2>>$OUT/ncu_source_$TAG.log
echo "source rc=$? $(wc -l < $OUT/ncu_source_$TAG.csv) lines"
