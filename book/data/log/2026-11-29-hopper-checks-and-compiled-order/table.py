# Forward and forward+backward of the registered attentions at chapter 20's table shapes (flash_sweep.TABLE_SHAPES),
# bf16, inputs (B, H, N, d), do_bench with 100 ms of repetitions, as chapter 20 times them; rows to argv[1] (CSV).
import sys
from systems.bench import flash_sweep as fs
df = fs.table(("flash_hopper", "flash_triton", "sdpa_cudnn", "sdpa_flash"), shapes=fs.TABLE_SHAPES, dtype="bf16",
              rep_ms=100)
df.to_csv(sys.argv[1], index=False)
