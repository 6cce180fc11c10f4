#!/usr/bin/env bash
set -u
t0=$(date +%s)
.gpu/multi.sh 480 20_flash_attention_hopper:resume
export PYTHONPATH=/tmp/site:$PWD
left=$(( 585 - ($(date +%s) - t0) ))
(( left > 20 )) && timeout $left python3 -m pytest -m gpu tests/test_flash_hopper_cuda.py -q -p no:cacheprovider -k "backward_matches or takes or one_pass" > $OUT/pytest.log 2>&1
echo "pytest rc=$? after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/pytest.log)"; grep -E "^(FAILED|ERROR)" $OUT/pytest.log | head
