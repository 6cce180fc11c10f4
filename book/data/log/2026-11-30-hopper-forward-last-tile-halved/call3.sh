#!/usr/bin/env bash
# One H200, from the repository's root: f = the change as committed (fbe515f) and m = main before
# it (9fcce7e), built side by side; every GPU test of test_flash_hopper_cuda.py on f (stopped at 330 s); ab_fwd.py
# on m f f m while the call has time; table.py on f last.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv > $OUT/machine.txt
t0=$(date +%s)
build='import torch; from systems.attention.flash_cpp.hopper import unavailable; print("build:", unavailable(torch.device("cuda")))'
for t in m f; do
  (cd .gpu/$t && TORCH_EXTENSIONS_DIR=/tmp/ext_$t PYTHONPATH=/tmp/site:$PWD python3 -c "$build" > $OUT/build_$t.log 2>&1) &
done
wait
echo "built after $(( $(date +%s) - t0 )) s: $(tail -qn1 $OUT/build_*.log | tr '\n' ' ')"
(cd .gpu/f && export TORCH_EXTENSIONS_DIR=/tmp/ext_f PYTHONPATH=/tmp/site:$PWD && timeout 330 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_flash_hopper_cuda.py > $OUT/pytest.log 2>&1)
echo "pytest rc=$? after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/pytest.log)"
for turn in "0 m" "0 f" "1 f" "1 m"; do
  set -- $turn
  if (( $(date +%s) - t0 > 500 )); then echo "skipped round $1 $2"; continue; fi
  (cd .gpu/$2 && export TORCH_EXTENSIONS_DIR=/tmp/ext_$2 PYTHONPATH=/tmp/site:$PWD && timeout 60 python3 ../ab_fwd.py $2 $1 >> $OUT/ab_fwd.jsonl) 2>> $OUT/ab.err
  echo "round $1 $2 rc=$? after $(( $(date +%s) - t0 )) s"
done
left=$(( 585 - ($(date +%s) - t0) ))
if (( left > 45 )); then
  (cd .gpu/f && export TORCH_EXTENSIONS_DIR=/tmp/ext_f PYTHONPATH=/tmp/site:$PWD && timeout $left python3 ../table.py f fwd fwd_bwd >> $OUT/table.jsonl) 2>> $OUT/table.err
  echo "table rc=$? after $(( $(date +%s) - t0 )) s"
fi
