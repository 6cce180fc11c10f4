#!/usr/bin/env bash
# n = d56db4a (O, dK, dV and dQ stored 16 bytes a lane), tn = n with tn.diff (the forward's timeline stamps): build
# both; timeline.py on tn; every GPU test of test_flash_hopper_cuda.py on n (stopped at 330 s); table.py on n.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv > $OUT/machine.txt
t0=$(date +%s)
build='import torch; from systems.attention.flash_cpp.hopper import unavailable; print("build:", unavailable(torch.device("cuda")))'
for t in n tn; do
  (cd .gpu/$t && TORCH_EXTENSIONS_DIR=/tmp/ext_$t PYTHONPATH=/tmp/site:$PWD python3 -c "$build" > $OUT/build_$t.log 2>&1) &
done
wait
echo "built after $(( $(date +%s) - t0 )) s: $(tail -qn1 $OUT/build_*.log | tr '\n' ' ')"
(cd .gpu/tn && export TORCH_EXTENSIONS_DIR=/tmp/ext_tn PYTHONPATH=/tmp/site:$PWD && timeout 100 python3 ../timeline.py > $OUT/timeline.jsonl) 2> $OUT/timeline.err
echo "timeline rc=$? after $(( $(date +%s) - t0 )) s"
(cd .gpu/n && export TORCH_EXTENSIONS_DIR=/tmp/ext_n PYTHONPATH=/tmp/site:$PWD && timeout 330 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_flash_hopper_cuda.py > $OUT/pytest.log 2>&1)
echo "pytest rc=$? after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/pytest.log)"
left=$(( 570 - ($(date +%s) - t0) ))
if (( left > 45 )); then
  (cd .gpu/n && export TORCH_EXTENSIONS_DIR=/tmp/ext_n PYTHONPATH=/tmp/site:$PWD && timeout $left python3 ../table.py n fwd fwd_bwd >> $OUT/table.jsonl) 2>> $OUT/table.err
  echo "table rc=$? after $(( $(date +%s) - t0 )) s"
fi
