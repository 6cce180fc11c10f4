#!/usr/bin/env bash
set -u
export PYTHONPATH=$PWD
STALLS=$(for r in barrier long_scoreboard short_scoreboard mio_throttle math_pipe_throttle wait not_selected selected dispatch_stall lg_throttle no_instruction membar sleeping; do printf ",smsp__average_warps_issue_stalled_%s_per_issue_active.ratio" $r; done)
timeout 200 ncu --kernel-name regex:"flash_bwd_dkdv" \
  --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section MemoryWorkloadAnalysis \
  --metrics sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum$STALLS \
  python3 .gpu/bwd_probe.py ncu1 > $OUT/bwd_ncu1.txt 2>&1
echo "ncu rc=$?"; grep -c "Section" $OUT/bwd_ncu1.txt
