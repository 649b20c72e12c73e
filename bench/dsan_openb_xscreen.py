"""Session 8 (O8) screen helper: hypothetical per-node x cluster-wide columns for the fast
scorer, without a schema change (monkeypatched into dsan.train.linear's COLUMNS for this
process only), then ``python -m dsan.train.search``'s ``--screen`` with the same arguments.

Columns: ``shape1_hostable_after`` for whole-GPU pods times a gate on the cluster's free CPU
share cs and free GPU share gs: x_bin (gs < cs), x_lin4 (clip(4 (cs - gs), 0, 1)), x_m05 /
x_m15 / x_m18 (cs - gs above 0.05 / 0.15 / 0.18), x_nc (x_bin, pods without a GPU-model
constraint only), x_multi / x_single (x_bin, pods asking for 2+ GPUs / one GPU). Prints, on
stderr, how many whole-GPU decisions per file had the gate on.
Example (docs/results/dsan_openb.md, session 8)::

    DSAN_TRACES=../shared/traces python bench/dsan_openb_xscreen.py --init \
        dsan/train/openb_skip.json --screen cands.json --out out/s --screen-seeds 11 12 13 14 \
        --workloads cpu100 multigpu30 multigpu50 cpu250
"""
import collections
import json
import sys

import numpy as np

import dsan.train.linear as L
import dsan.train.search as S

STATS = collections.Counter()

def _shares(snap):
    gcap = float(snap.gpu_count.sum()) * 1000.0
    gs = float(snap.gpu_free.sum()) / gcap if gcap > 0 else 0.0
    ccap = float(snap.cpu_cap.sum())
    cs = float((snap.cpu_cap - snap.cpu_used).sum()) / ccap if ccap > 0 else 0.0
    return gs, cs

def _whole(c):
    return c.k > 0 and c.pod.gpu_milli >= 1000

def mk(gate, nc=False, ng=None):
    def col(c):
        if not _whole(c) or (nc and c.pod.gpu_models) or (ng is not None and not ng(c.pod.num_gpu)):
            return np.zeros(len(c.nodes))
        gs, cs = _shares(c.snap)
        g = gate(gs, cs)
        STATS[(L._cur, g > 0)] += 1
        return L._hostable(c, 1) * g
    return col

GATES = {
    "x_bin": lambda gs, cs: float(gs < cs),
    "x_lin4": lambda gs, cs: float(np.clip(4 * (cs - gs), 0, 1)),
    "x_m05": lambda gs, cs: float(cs - gs > 0.05),
    "x_m15": lambda gs, cs: float(cs - gs > 0.15),
    "x_m18": lambda gs, cs: float(cs - gs > 0.18),
}
L._cur = None
for name, g in GATES.items():
    L.COLUMNS[name] = mk(g)
L.COLUMNS["x_nc"] = mk(GATES["x_bin"], nc=True)
L.COLUMNS["x_multi"] = mk(GATES["x_bin"], ng=lambda n: n >= 2)
L.COLUMNS["x_single"] = mk(GATES["x_bin"], ng=lambda n: n == 1)
NEW = (*GATES, "x_nc", "x_multi", "x_single")
L.FEATURE_NAMES = tuple(L.FEATURE_NAMES) + NEW
L.SUPPORTED = tuple(L.SUPPORTED) + NEW


_orig = S.Episodes.unallocated
def unalloc(self, features, w, workload, seed, gpu_w=None, share_w=None):
    L._cur = workload
    return _orig(self, features, w, workload, seed, gpu_w, share_w)
S.Episodes.unallocated = unalloc

if __name__ == "__main__":
    rc = S.main(sys.argv[1:])
    print(json.dumps({f"{k[0]}|{k[1]}": v for k, v in STATS.items()}), file=sys.stderr)
    raise SystemExit(rc)
