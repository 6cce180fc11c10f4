"""The log entry's table, from this directory's records: python tables.py"""
import csv
from pathlib import Path

HERE = Path(__file__).parent
rows = [next(csv.DictReader(open(HERE / f"kept_{i}.csv"))) for i in range(3)]
plain = float(rows[1]["ms"])
print("| recipe (16 blocks) | ms | plain / this | MFU | GiB above what existed before the step |")
print("|---|---:|---:|---:|---:|")
for r in rows:
    print(f"| {r['recipe']} | {float(r['ms']):.1f} | {plain / float(r['ms']):.3f} | {float(r['mfu']):.1%} |"
          f" {float(r['extra_gib']):.2f} |")
