# The log entry's tables from the A/B records: per shape, the faster of two rounds of each tree (ms) and their ratio.
import collections, json, sys

def table(path, impls, names):
    rows = [json.loads(line) for line in open(path)]
    best = collections.defaultdict(lambda: float("inf"))
    for r in rows:
        best[r["shape"], r["impl"], r["tree"]] = min(best[r["shape"], r["impl"], r["tree"]], r["ms"])
    shapes = list(dict.fromkeys(r["shape"] for r in rows))
    head = ["shape (B×H×N×d)"] + [f"{i}, {names[t]}" for i in impls for t in ("base", "new")] + \
           [f"{i}: {names['new']} / {names['base']}" for i in impls] + ["cuDNN backward", f"{names['new']} / cuDNN"]
    print("| " + " | ".join(head) + " |\n|---|" + "---:|" * (len(head) - 1))
    for s in shapes:
        cells = [f"{best[s, i, t]:.3f}" for i in impls for t in ("base", "new")]
        cells += [f"{best[s, i, 'new'] / best[s, i, 'base']:.3f}" for i in impls]
        cudnn = min(best[s, "cudnn backward", "base"], best[s, "cudnn backward", "new"])
        cells += [f"{cudnn:.3f}", f"{best[s, 'hopper backward', 'new'] / cudnn:.3f}"]
        print("| " + " | ".join([s.replace("x", "×")] + cells) + " |")

table("ab_fc6eec5_vs_bbd24c2.jsonl", ["hopper backward", "flash_hopper fwd+bwd"], {"base": "`bbd24c2`", "new": "`fc6eec5`"})
print()
table("ab_d64_split_vs_fc6eec5.jsonl", ["hopper backward"], {"base": "`fc6eec5`", "new": "split"})
