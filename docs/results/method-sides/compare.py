"""Compare two same_seed.py outputs leaf by leaf (timing and temp dirs left out)."""

import json
import sys

a = json.load(open(sys.argv[1]))
b = json.load(open(sys.argv[2]))
IGNORED = {"results-dir", "train_round_s_mean"}  # a temp dir; wall time


def diff(x, y, path=""):
    """List the differing leaves of two JSON values."""
    out = []
    if isinstance(x, dict) and isinstance(y, dict):
        for k in sorted(set(x) | set(y)):
            if k in IGNORED:
                continue
            if k not in x or k not in y:
                out.append(f"{path}/{k}: only in {'after' if k not in x else 'before'}")
            else:
                out += diff(x[k], y[k], f"{path}/{k}")
    elif isinstance(x, list) and isinstance(y, list) and len(x) == len(y):
        for i, (p, q) in enumerate(zip(x, y, strict=True)):
            out += diff(p, q, f"{path}[{i}]")
    elif x != y:
        out.append(f"{path}: {str(x)[:120]} != {str(y)[:120]}")
    return out


for run in sorted(set(a) | set(b)):
    d = diff(a.get(run), b.get(run), run)
    print(f"{run}: {'identical' if not d else f'{len(d)} differences'}")
    for line in d[:12]:
        print("   ", line)
