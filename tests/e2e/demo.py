"""`make cluster-demo`: the DSAN stack on loopback, one mixed workload scheduled twice.

Two identical pools of kwok GPU nodes (``--nodes`` each, 8 GPUs per node). The same workload
goes to pool A with ``schedulerName: dsan-scheduler`` and to pool B with the default scheduler;
the demo prints where the pods landed (GPU use per node, nodes left with all 8 GPUs free for a
large training job, partly used GPU nodes), then the sidecar's scoring latency read from its
/metrics, and tears everything down.
"""

from __future__ import annotations

import argparse
import functools
import random
import re
import time
from typing import Any

from kubernetes import client

from dsan.api import types as t
from tests.support.localcluster import LocalCluster, LocalClusterConfig
from tests.support.workload import BindingWatch, add_nodes, create_all, fleet, pod_manifest

GPUS_PER_NODE = 8


def mixed_workload(n: int, seed: int, scheduler: str | None, pool: str) -> list[dict[str, Any]]:
    """Training pods with 1, 2 or 4 GPUs, batch and web pods on CPU, in a seeded random order."""
    rng = random.Random(seed)
    pods = []
    for i in range(n):
        kind = rng.choices(["train", "batch", "web"], weights=[5, 3, 2])[0]
        gpus = rng.choice([1, 1, 2, 4]) if kind == "train" else 0
        cpu = {"train": "4", "batch": "8", "web": "1"}[kind]
        pods.append(
            pod_manifest(
                f"{kind}-{i:03d}",
                scheduler=scheduler,
                cpu=cpu,
                memory="8Gi",
                gpus=gpus,
                annotations={t.ANNOTATION_TASK_TYPE: kind},
                node_selector={"dsan.io/pool": pool},
            )
        )
    return pods


def placement(core: Any, ns: str, nodes: list[str]) -> dict[str, int]:
    used = dict.fromkeys(nodes, 0)
    for p in core.list_namespaced_pod(ns).items:
        req = p.spec.containers[0].resources.requests or {}
        if p.spec.node_name in used:
            used[p.spec.node_name] += int(req.get(t.RESOURCE_GPU, 0))
    return used


def summary(used: dict[str, int]) -> str:
    free_nodes = sum(u == 0 for u in used.values())
    partial = sum(0 < u < GPUS_PER_NODE for u in used.values())
    full = sum(u == GPUS_PER_NODE for u in used.values())
    hist = " ".join(str(u) for u in sorted(used.values(), reverse=True))
    return (
        f"nodes with 8 free GPUs {free_nodes:3d} | partly used {partial:3d} | full {full:3d}"
        f"\n      GPUs used per node: {hist}"
    )


def latency(metrics: str) -> str:
    m = re.search(r"dsan_sidecar_policy_info\{([^}]*)\}", metrics)
    out = [f"policy: {m.group(1) if m else 'unknown'}"]
    for api in ("http", "grpc"):
        rows = re.findall(
            rf'dsan_sidecar_score_latency_seconds_bucket\{{api="{api}",le="([^"]+)",'
            rf'phase="total"\}} (\S+)',
            metrics,
        )
        total = float(rows[-1][1]) if rows else 0.0
        if not total:
            continue
        q = {}
        for quant in (0.5, 0.99):
            q[quant] = next(float(le) for le, c in rows if float(c) >= quant * total)
        out.append(
            f"{api}: {total:.0f} requests, p50 <= {q[0.5] * 1e3:g} ms, "
            f"p99 <= {q[0.99] * 1e3:g} ms (histogram bucket bounds)"
        )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=50, help="kwok GPU nodes per pool")
    ap.add_argument("--pods", type=int, default=150)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--policy", default=None, help="sidecar policy (default: the sidecar's)")
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    with LocalCluster(LocalClusterConfig(nodes=0, policy=args.policy)) as lc:
        print(
            f"control plane + sidecar + dsan-scheduler up in {time.monotonic() - t0:.1f} s "
            f"({lc.cp.dir})"
        )
        with lc.cp.api_client() as api:
            core = client.CoreV1Api(api)
            pools = {}
            for pool in ("a", "b"):
                nodes = fleet(args.nodes, prefix=f"pool{pool}", labels={"dsan.io/pool": pool})
                add_nodes(core, nodes, f"dsan.io/pool={pool}")
                pools[pool] = [n["metadata"]["name"] for n in nodes]
            print(f"2 pools x {args.nodes} kwok nodes x {GPUS_PER_NODE} GPUs Ready")
            results = {}
            for pool, ns, sched in (
                ("a", "demo-dsan", t.SCHEDULER_NAME),
                ("b", "demo-default", None),
            ):
                lc.cp.ensure_namespace(ns)
                pods = mixed_workload(args.pods, args.seed, sched, pool)
                watch = BindingWatch(core, ns).start()
                start = time.monotonic()
                create_all(functools.partial(core.create_namespaced_pod, ns), pods, 4)
                try:
                    watch.wait([p["metadata"]["name"] for p in pods], timeout=120)
                finally:
                    watch.stop()
                results[ns] = (placement(core, ns, pools[pool]), time.monotonic() - start)
            gpus = sum(
                int(p["spec"]["containers"][0]["resources"]["requests"].get(t.RESOURCE_GPU, 0))
                for p in mixed_workload(args.pods, args.seed, None, "a")
            )
            print(
                f"\nworkload: {args.pods} pods (train/batch/web, seed {args.seed}), "
                f"{gpus} GPUs requested in all\n"
            )
            for ns, label in (("demo-dsan", "dsan-scheduler"), ("demo-default", "default")):
                used, secs = results[ns]
                print(f"{label:15s} all bound in {secs:.1f} s\n      {summary(used)}")
        assert lc.sidecar is not None
        print(
            "\nsidecar scoring latency (server side, from /metrics):\n"
            + latency(lc.sidecar.metrics())
        )
    print("torn down")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
