set -u
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/.gpu/ext SYSTEMS_GIT_COMMIT=$(cat .gpu/commit)
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee $OUT/machine.txt
python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.version.cuda)" | tee -a $OUT/machine.txt
t0=$(date +%s)
python3 -c "
import torch
from systems.attention.flash_cpp import hopper, cuda_unavailable
from systems.attention.flash_triton import host
print('hopper', hopper.unavailable(torch.device('cuda')), 'cuda', cuda_unavailable(torch.device('cuda')), 'host', host.unavailable())
" 2>&1 | tail -5
echo build $(( $(date +%s) - t0 )) s
for i in 1 2; do timeout -s KILL 200 python3 -m systems.bench.call_overhead > $OUT/co$i.txt 2> $OUT/co$i.err; echo rc=$?; done
cat $OUT/co1.txt
tar czf $OUT/cache.tgz .gpu/ext; echo total $(( $(date +%s) - t0 )) s
