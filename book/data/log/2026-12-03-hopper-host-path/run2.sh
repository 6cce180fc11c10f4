set -u
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/.gpu/ext SYSTEMS_GIT_COMMIT=$(cat .gpu/commit)
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee $OUT/machine.txt
t0=$(date +%s)
python3 -c "
import torch
from systems.attention.flash_cpp import hopper, cuda_unavailable
from systems.attention.flash_triton import host
print('hopper', hopper.unavailable(torch.device('cuda')), 'cuda', cuda_unavailable(torch.device('cuda')), 'host', host.unavailable())
" 2>&1 | tail -3
echo build $(( $(date +%s) - t0 )) s
for i in 1 2; do timeout -s KILL 200 python3 -m systems.bench.call_overhead > $OUT/co$i.txt 2> $OUT/co$i.err; echo rc=$?; done
echo co $(( $(date +%s) - t0 )) s
timeout -s KILL 240 python3 -m systems.bench.call_overhead --floor > $OUT/floor.txt 2> $OUT/floor.err; echo rc=$?; cat $OUT/floor.txt
echo floor $(( $(date +%s) - t0 )) s
timeout -s KILL 150 python3 -m pytest -o addopts="" -p no:cacheprovider -m gpu -q -x tests/test_flash_hopper_cuda.py -k "forward and not backward" 2>&1 | tail -3
echo total $(( $(date +%s) - t0 )) s
paste <(cut -c1-130 $OUT/co1.txt) <(awk '{print $(NF-1)}' $OUT/co2.txt)
tar czf $OUT/cache.tgz .gpu/ext
