"""Scheduling throughput on a real control plane: the dsan-scheduler profiles (kube-scheduler +
the DSAN sidecar as HTTP extender, or through the DSANScore plugin over gRPC) against the
default profile of the same kube-scheduler build, measured in the same run on the same 1,000
kwok nodes.

    .venv/bin/python -m bench.throughput_cluster --nodes 1000 --pods 2000 --rounds 2 \
        --out docs/results/throughput.md

``--python PY`` runs the sidecar with another interpreter (an environment without torch:
``bench/serve_env.sh``); ``--compare TREE`` starts a second sidecar from another checkout of
this repository (its own ``dsan serve``, ``--compare-python`` its interpreter) and measures
its profiles as ``dsan@base`` and ``dsan-grpc@base`` in the same rounds, so the report gives
the two trees' throughput side by side. Each sidecar's start (process start to /readyz, the
informers synced over every node) and its resident memory then are reported too.

Method. For each measurement a fresh namespace gets ``--pods`` pods whose schedulerName names
a scheduler that is *not running yet* (so pod creation speed, a Python client here, is not what
we measure); then that kube-scheduler starts, and a watch records when each pod's nodeName
appears. Throughput = (pods - 1) / (last bind - first bind). Profiles alternate order across
rounds (A B, B A, ...) because the cluster fills up as rounds go by. The dsan scheduler runs
with ``--vmodule=schedule_one=5`` so every extender failure (timeout, refused) is logged and
counted: a pod that fell back to default scoring must not pass as a fast DSAN decision.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client

from dsan.api import types as t
from tests.support.controlplane import SCHEDULER_CONFIG_DIR, ControlPlane, ControlPlaneConfig
from tests.support.sidecar import Sidecar
from tests.support.workload import BindingWatch, add_nodes, create_all, fleet, pod_manifest

EXTENDER_ERROR = "Failed to run extender's priority function"
BIND_LINE = re.compile(r"^I\d{4} (\d\d:\d\d:\d\d\.\d+) .*\"Successfully bound pod to node\"", re.M)
#: profile -> (schedulerName, config file). "dsan" scores through the HTTP extender,
#: "dsan-grpc" through the DSANScore framework plugin and the sidecar's gRPC Score service;
#: "@base" the same, served by the --compare tree's sidecar.
PROFILES = {
    "default": ("default-scheduler", "default-scheduler.yaml"),
    "dsan": (t.SCHEDULER_NAME, "dsan-scheduler.yaml"),
    "dsan-grpc": (t.SCHEDULER_NAME, "dsan-scheduler-grpc.yaml"),
    "dsan@base": (t.SCHEDULER_NAME, "dsan-scheduler.yaml"),
    "dsan-grpc@base": (t.SCHEDULER_NAME, "dsan-scheduler-grpc.yaml"),
}
GRPC_ERROR = "DSAN sidecar unavailable, scoring without it"


@dataclass
class Run:
    profile: str
    round: int
    pods: int
    seconds: float
    pods_per_s: float
    start_to_all_s: float
    extender_failures: int
    load_1min: float  # at the end of the measurement


def workload(n: int, scheduler: str) -> list[dict[str, Any]]:
    """A mixed workload: 3 of 4 pods CPU-only (web/batch), 1 of 4 wants one GPU (train)."""
    pods = []
    for i in range(n):
        gpu = i % 4 == 0
        pods.append(
            pod_manifest(
                f"p{i:05d}",
                scheduler=scheduler,
                cpu="2" if gpu else "500m",
                memory="4Gi" if gpu else "512Mi",
                gpus=1 if gpu else 0,
                annotations={t.ANNOTATION_TASK_TYPE: "train" if gpu else "web"},
            )
        )
    return pods


def measure(cp: ControlPlane, core: Any, sidecars: dict[str, Sidecar], profile: str,
            rnd: int, n: int) -> Run:
    scheduler_name, cfg_file = PROFILES[profile]
    sidecar = sidecars["base" if profile.endswith("@base") else "new"]
    ns = f"bench-{profile.replace('@', '-')}-{rnd}"
    cp.ensure_namespace(ns)
    create_all(lambda p: core.create_namespaced_pod(ns, p), workload(n, scheduler_name), 8)
    watch = BindingWatch(core, ns).start()
    time.sleep(1.0)  # the watch has listed; nothing binds yet (no scheduler for this name)
    assert not watch.bound, "pods bound before their scheduler started"
    # Same logging for both profiles: schedule_one.go at V(5) logs each bind with a
    # microsecond timestamp (the throughput clock) and, for dsan, every extender failure.
    extra = ("--vmodule=schedule_one=5",)
    started = time.monotonic()
    kind = profile.split("@")[0]
    name = f"{profile.replace('@', '-')}-{rnd}"
    proc = cp.start_scheduler(
        name,
        SCHEDULER_CONFIG_DIR / cfg_file,
        extender_url=sidecar.extender_url if kind == "dsan" else None,
        score_address=f"127.0.0.1:{sidecar.grpc_port}" if kind == "dsan-grpc" else None,
        extra_args=extra,
    )
    try:
        bound = watch.wait([f"p{i:05d}" for i in range(n)], timeout=600)
        # klog flushes its buffer every few seconds: the watch can see the last bindings
        # before their log lines reach the file, and a stopped scheduler may never write them.
        deadline = time.monotonic() + 30
        while len(bind_times(proc.log.read_text(errors="replace"))) < n:
            if time.monotonic() > deadline:
                break
            time.sleep(0.5)
    finally:
        watch.stop()
        cp.stop_scheduler(name)
    log = proc.log.read_text(errors="replace")
    binds = bind_times(log)
    if len(binds) != n:
        raise RuntimeError(f"{profile}: {len(binds)} bind lines in {proc.log}, expected {n}")
    span = binds[-1] - binds[0]
    last_seen = max(ts for _, ts in bound.values())
    return Run(
        profile,
        rnd,
        n,
        span,
        (n - 1) / span,
        last_seen - started,
        log.count(EXTENDER_ERROR) + log.count(GRPC_ERROR),
        os.getloadavg()[0],
    )


def bind_times(log: str) -> list[float]:
    """Seconds-of-day of each "Successfully bound pod" klog line, sorted. The scheduler's own
    clock: a Python watch on this loaded 2-core box lags by seconds and would stretch the span."""
    out = []
    for m in BIND_LINE.finditer(log):
        h, mi, sec = m.group(1).split(":")
        out.append(int(h) * 3600 + int(mi) * 60 + float(sec))
    return sorted(out)


def report(runs: list[Run], args: argparse.Namespace, sidecars: dict[str, Sidecar],
           policy: str, latency: str) -> str:
    profiles = [p for p in PROFILES if any(r.profile == p for r in runs)]
    med = {p: statistics.median(r.pods_per_s for r in runs if r.profile == p) for p in profiles}
    lines = [
        "# Scheduling throughput: dsan-scheduler vs default profile",
        "",
        f"Measured by `bench/throughput_cluster.py --nodes {args.nodes} --pods {args.pods} "
        f"--rounds {args.rounds} --profiles {','.join(profiles)}"
        + (f" --compare {args.compare}" if args.compare else "") + "`: one run, every "
        "profile on the same kube-scheduler build (k8s.io/kubernetes v1.36.3 + the DSANScore "
        f"plugin), the same apiserver, etcd and {args.nodes} kwok nodes (8 GPUs each), "
        f"everything on this machine ({os.cpu_count()} cores; 1-minute load average at the end "
        f"of each measurement {min(r.load_1min for r in runs):.1f}-"
        f"{max(r.load_1min for r in runs):.1f}, counting the control plane, the sidecars and "
        f"this benchmark). Workload per measurement: {args.pods} pods, 1 in 4 requesting one "
        f"nvidia.com/gpu. Sidecar policy: `{policy}`.",
        "",
        "- `default`: scheduler-config/default-scheduler.yaml (stock profile)",
        "- `dsan`: scheduler-config/dsan-scheduler.yaml (HTTP extender, the shipped default)",
        "- `dsan-grpc`: scheduler-config/dsan-scheduler-grpc.yaml (DSANScore plugin -> gRPC)",
    ]
    if "base" in sidecars:
        lines.append("- `@base`: the same profile served by the sidecar of the `--compare` "
                     "checkout, in the same rounds")
    lines += [
        "",
        "| round | profile | pods | first->last bind (s) | pods/s "
        "| scheduler start->watch saw all (s) | sidecar failures | load |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        lines.append(
            f"| {r.round} | {r.profile} | {r.pods} | {r.seconds:.2f} | {r.pods_per_s:.0f} "
            f"| {r.start_to_all_s:.2f} | {r.extender_failures} | {r.load_1min:.1f} |"
        )
    ratios = [f"{p} {med[p]:.0f} pods/s ({med[p] / med['default']:.2f}x default)"
              for p in profiles]
    lines += ["", "**Medians:** " + ", ".join(ratios) + "."]
    base = [f"{p} {med[p] / med[p + '@base']:.2f}x its `@base`" for p in ("dsan", "dsan-grpc")
            if p in med and p + "@base" in med]
    if base:
        lines += ["", "**Against the compared tree, same rounds:** " + ", ".join(base) + "."]
    lines += ["", "Sidecars (process start to /readyz with every node informed; resident memory "
              "then): " + ", ".join(
                  f"{k} {sc.start_s:.2f} s, {sc.ready_rss / 2**20:.0f} MiB"
                  for k, sc in sidecars.items()) + "."]
    lines += [
        "",
        f"Sidecar server-side score latency over the run (total phase, histogram bucket "
        f"bounds): {latency}.",
        "",
        "Sidecar failures count the dsan schedulers' `Failed to run extender's priority "
        "function` / `DSAN sidecar unavailable` log lines (timeouts of the 100 ms budget): pods "
        "scheduled without DSAN's scores. Throughput = (pods - 1) / (last bind - first bind), "
        "both read from the scheduler's own log (`Successfully bound pod to node`, microsecond "
        "klog timestamps; every profile logs schedule_one.go at V(5)); pods are created before "
        "their scheduler starts, so the Python client's creation rate is not measured. The "
        "start->watch column is wall time from starting the scheduler process until a Python "
        "watch had seen every binding (includes startup and the watch's lag).",
    ]
    return "\n".join(lines) + "\n"


def latency_summary(metrics_text: str) -> str:
    """p50 and p99 bucket bounds of the sidecar's total score latency, per API."""
    out = []
    for api in ("http", "grpc"):
        rows = re.findall(
            rf'dsan_sidecar_score_latency_seconds_bucket\{{api="{api}",le="([^"]+)",'
            rf'phase="total"\}} (\S+)',
            metrics_text,
        )
        total = float(rows[-1][1]) if rows else 0.0
        if not total:
            continue
        q = [next(float(le) for le, c in rows if float(c) >= f * total) for f in (0.5, 0.99)]
        out.append(f"{api} {total:.0f} requests, p50 <= {q[0] * 1e3:g} ms, "
                   f"p99 <= {q[1] * 1e3:g} ms")
    return "; ".join(out) or "n/a"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--pods", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--policy", default=None, help="sidecar policy (default: the sidecar's)")
    ap.add_argument("--python", default=sys.executable, help="the sidecar's interpreter")
    ap.add_argument("--compare", type=Path, default=None,
                    help="another checkout whose sidecar serves the @base profiles")
    ap.add_argument("--compare-python", default=sys.executable)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--profiles", default=None,
                    help=f"comma-separated subset of {list(PROFILES)} (default: every profile, "
                    "the @base ones with --compare)")
    args = ap.parse_args(argv)
    if args.nodes < 2 or args.pods < 2 or args.rounds < 1:
        ap.error("--nodes and --pods must be >= 2 and --rounds >= 1")
    every = [p for p in PROFILES if args.compare or not p.endswith("@base")]
    profiles = [p.strip() for p in (args.profiles or ",".join(every)).split(",") if p.strip()]
    if "default" not in profiles or not set(profiles) <= set(every):
        ap.error(f"--profiles must include default and name only {every}")
    cfg = ControlPlaneConfig(default_scheduler=False)
    with ControlPlane(cfg) as cp, cp.api_client(pool=16) as api:
        core = client.CoreV1Api(api)
        t0 = time.monotonic()
        add_nodes(core, fleet(args.nodes, prefix="bench"), "type=kwok", timeout=300)
        print(f"{args.nodes} nodes Ready in {time.monotonic() - t0:.1f} s", file=sys.stderr)
        sidecars = {"new": Sidecar(cp.kubeconfig, cp.dir / "new", policy=args.policy,
                                   python=args.python)}
        if args.compare:
            sidecars["base"] = Sidecar(cp.kubeconfig, cp.dir / "base", policy=args.policy,
                                       python=args.compare_python, tree=args.compare.resolve())
        try:
            for sc in sidecars.values():
                sc.workdir.mkdir(parents=True, exist_ok=True)
                sc.start(ready_timeout=120)
            runs: list[Run] = []
            for rnd in range(args.rounds):
                # Alternate the order: the cluster fills up as measurements go by.
                order = profiles if rnd % 2 == 0 else profiles[::-1]
                for profile in order:
                    run = measure(cp, core, sidecars, profile, rnd, args.pods)
                    print(run, file=sys.stderr)
                    runs.append(run)
            metrics = sidecars["new"].metrics()
        finally:
            for sc in sidecars.values():
                sc.stop()
    m = re.search(r"dsan_sidecar_policy_info\{([^}]*)\}", metrics)
    policy = m.group(1) if m else (args.policy or "sidecar default")
    text = report(runs, args, sidecars, policy, latency_summary(metrics))
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
