import re, sys, difflib
def kernels(path):
    listing = open(path).read()
    return {part.split("\n", 1)[0].strip(): re.sub(r"/\*[0-9a-f]{4,}\*/", "", part.split("\n", 1)[1])
            for part in re.split(r"\n\s+Function : ", listing)[1:]}
old, new = kernels(sys.argv[1]), kernels(sys.argv[2])
norm = {}
for name in new:
    m = re.sub(r"(I(?:13__nv_bfloat16|6__half))Li(\d+)ELi(\d+)E", lambda m: m.group(1) + f"Li{m.group(2)}E" if m.group(2) == m.group(3) else m.group(0), name, count=1)
    norm[m] = name
same = diff = 0
for name in sorted(old):
    n = norm.get(name)
    if n is None: print("MISSING", name[:120]); continue
    a = [l for l in old[name].splitlines() if l.strip()]; b = [l for l in new[n].splitlines() if l.strip()]
    if a == b: same += 1
    else:
        diff += 1; print("DIFF", name[:140], sum(1 for l in difflib.unified_diff(a, b, lineterm="", n=0) if l[:1] in "+-"))
print("same", same, "diff", diff, "new only", len(new) - len(old))
