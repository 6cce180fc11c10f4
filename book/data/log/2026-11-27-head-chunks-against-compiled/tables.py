"""The log entry's table, from head.jsonl: python tables.py"""
import json
import statistics
from pathlib import Path

rows = [json.loads(line) for line in open(Path(__file__).parent / "head.jsonl")]
by = {}
for r in rows:
    by.setdefault(r["variant"], []).append(r)
compiled = statistics.median(r["ms"] for r in by["compiled"])
print("| variant | tokens a chunk | ms, four rounds | median ms | / compiled | GiB above the inputs |")
print("|---|---:|---|---:|---:|---:|")
for name, runs in by.items():
    ms = [r["ms"] for r in sorted(runs, key=lambda r: r["round"])]
    chunk = runs[0]["chunk_tokens"] or ("3456 (default)" if name.startswith("fused") else "—")
    print(f"| {name} | {chunk} | {', '.join(f'{m:.1f}' for m in ms)} | {statistics.median(ms):.1f} |"
          f" {statistics.median(ms) / compiled:.3f} | {runs[0]['extra_gib']:.2f} |")
