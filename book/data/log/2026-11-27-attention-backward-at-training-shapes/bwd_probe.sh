#!/usr/bin/env bash
set -u
export PYTHONPATH=$PWD
nvidia-smi --query-gpu=name --format=csv,noheader
t0=$(date +%s)
timeout 150 python3 .gpu/bwd_probe.py profile > $OUT/bwd_profile.jsonl 2> $OUT/bwd_profile.err; echo "profile rc=$? after $(( $(date +%s) - t0 )) s"
STALLS=$(for r in barrier long_scoreboard short_scoreboard mio_throttle math_pipe_throttle wait not_selected selected dispatch_stall lg_throttle no_instruction membar sleeping; do printf ",smsp__average_warps_issue_stalled_%s_per_issue_active.ratio" $r; done)
timeout 200 ncu --kernel-name regex:"flash_bwd|bprop|dot_do|convert_dq" \
  --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section MemoryWorkloadAnalysis \
  --metrics sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_tensor_op_gmma.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum$STALLS \
  python3 .gpu/bwd_probe.py ncu > $OUT/bwd_ncu.txt 2>&1
echo "ncu rc=$? after $(( $(date +%s) - t0 )) s"; grep -c "Section" $OUT/bwd_ncu.txt
