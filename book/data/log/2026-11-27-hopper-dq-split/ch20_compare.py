# Chapter 20's forward+backward, flash_hopper against cuDNN, in its run at 4ccb651 (commit dab8d74) and at 80252bd
# (commit 9e73938), from the chapter's hopper_table.csv at each; and its compiled steps at 80252bd. Run from anywhere
# inside the repository.
from systems.pipeline import published_table

def published(commit, name):
    return published_table(commit, "20_flash_attention_hopper", name)

def table_at(commit):
    t = published(commit, "hopper_table")
    t = t[t["mode"] == "fwd_bwd"].pivot_table(index=["batch", "heads", "n_q", "d", "causal"], columns="impl", values="ms")
    return t.flash_hopper, t.flash_hopper / t.sdpa_cudnn

(old, old_r), (new, new_r) = table_at("dab8d74"), table_at("9e73938")
print("| shape (B×H×N×d) | causal | `flash_hopper` at `4ccb651` (ms) | / cuDNN | at `80252bd` (ms) | / cuDNN |")
print("|---|---|---:|---:|---:|---:|")
for key in new.index:
    b, h, n, d, causal = key
    print(f"| {b}×{h}×{n}×{d} | {'yes' if causal else 'no'} | {old[key]:.3f} | {old_r[key]:.3f} | {new[key]:.3f} | {new_r[key]:.3f} |")
print()
print("| size | batch | `sdpa` (ms) | `flash_hopper` (ms) | `flash_hopper` / `sdpa` |")
print("|---|---:|---:|---:|---:|")
for size in ["small", "medium", "large", "xl", "2.7B"]:
    s = published("9e73938", f"hopper_model_steps_{size}").set_index("attention")
    print(f"| {size} | {s.batch_size.iloc[0]} | {s.step_ms['sdpa']:.1f} | {s.step_ms['flash_hopper']:.1f} | "
          f"{s.step_ms['flash_hopper'] / s.step_ms['sdpa']:.3f} |")
