"""Hold, outside any allocator, everything of this GPU above what an H100 80GB HBM3 has (81,559 MiB in all, as
nvidia-smi reports it), so the other processes on the GPU see the free memory an H100 would give; until killed."""
import ctypes, time
import torch

torch.empty(1, device="cuda")
free, total = torch.cuda.mem_get_info()
held = ctypes.c_uint64(0)
rc = ctypes.CDLL("libcuda.so.1").cuMemAlloc_v2(ctypes.byref(held), ctypes.c_size_t(total - 81559 * 2**20))
assert rc == 0, f"cuMemAlloc_v2 returned {rc}"
print("holding", round((total - 81559 * 2**20) / 2**30, 2), "GiB; free now", round(torch.cuda.mem_get_info()[0] / 2**30, 2), "GiB", flush=True)
while True:
    time.sleep(60)
