"""``dsan explain``: replay a simulator run up to decision N and explain that decision; or
(``dsan explain pod``) fetch a running sidecar's explanation of a pod it scored
(``GET /explain/<namespace>/<pod>``) and the pod as the cluster has it: base install only
(urllib, kubernetes)."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from dsan.api.types import ANNOTATION_SCORED_BY
from dsan.explain.decision import replay_openb, replay_scenario
from dsan.explain.explainers import EXPLAINABLE, DSANShapConfig, explain
from dsan.explain.report import PodInfo, table, write_report

DEFAULT_SIDECAR = "http://127.0.0.1:8888"


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--policy", default="dsan",
                   help=f"one of {', '.join(EXPLAINABLE)} (default dsan)")
    p.add_argument("--decision", type=int, required=True,
                   help="0-based index of the decision to explain")
    p.add_argument("--out", type=Path, default=Path("out") / "explain",
                   help="report folder (default out/explain)")
    p.add_argument("--model-dir", default=None,
                   help="DSAN model folder (default $DSAN_MODEL_DIR, else the shipped model)")
    p.add_argument("--background", type=int, default=32,
                   help="dsan: other candidates in the SHAP background (default 32)")
    p.add_argument("--permutations", type=int, default=8,
                   help="dsan: antithetic permutation pairs (default 8)")
    p.add_argument("--shap-seed", type=int, default=0,
                   help="dsan: seed of the background draw and the permutations")
    p.add_argument("--threads", type=int, default=1,
                   help="dsan: numpy's BLAS threads (default 1: the batches are small and extra "
                        "threads only contend on a busy machine)")
    p.add_argument("--top-k", type=int, default=10,
                   help="features per table and in the chart (default 10)")


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:  # type: ignore[type-arg,unused-ignore]
    ex = subparsers.add_parser("explain", help="explain scheduling decisions (SHAP report)")
    sub = ex.add_subparsers(dest="explain_command", metavar="RUN")
    op = sub.add_parser("openb",
                        help="replay the openb protocol (as `dsan sim openb`) up to decision N")
    op.add_argument("--pods", default="default",
                    help="pod CSV or openb workload name (default: default)")
    op.add_argument("--nodes", default=None,
                    help="node CSV (default: openb_node_list_gpu_node.csv)")
    op.add_argument("--seed", type=int, default=42)
    op.add_argument("--tune", type=float, default=1.3)
    op.add_argument("--tie-break", choices=("name", "order", "random"), default="name")
    _common(op)
    op.set_defaults(func=_run, run="openb")
    sc = sub.add_parser(
        "seed-table1", help="replay the seed scenario (as `dsan sim seed-table1`) up to decision N")
    sc.add_argument("--scenario", default="seed-table1", help="scenario name or YAML path")
    sc.add_argument("--seed", type=int, default=1)
    sc.add_argument("--hours", type=float, default=None,
                    help="simulated horizon (default: the scenario's)")
    sc.add_argument("--burst", action="store_true")
    _common(sc)
    sc.set_defaults(func=_run, run="seed-table1")
    pod = sub.add_parser(
        "pod", help="a pod the dsan-scheduler placed: the sidecar's explanation",
        description="Fetch GET /explain/NAMESPACE/NAME from the sidecar (in a cluster: "
                    "kubectl port-forward to it first, docs/explain.md) and print it.")
    pod.add_argument("pod", metavar="NAMESPACE/NAME")
    pod.add_argument("--kubeconfig", default=None,
                     help="also read the pod from this cluster: its node, its scheduler "
                          "and the dsan.io/scored-by annotation")
    pod.add_argument("--sidecar", default=DEFAULT_SIDECAR,
                     help=f"the sidecar's HTTP address (default {DEFAULT_SIDECAR})")
    pod.add_argument("--json", action="store_true", help="print the sidecar's JSON as is")
    pod.add_argument("--top-k", type=int, default=10, help="factors in the table (default 10)")
    pod.add_argument("--timeout", type=float, default=30.0,
                     help="seconds to wait for the sidecar (default 30)")
    pod.set_defaults(func=_run_pod)
    ex.set_defaults(func=lambda _a: (ex.print_help(), 2)[1])
    return ex


def _run_pod(args: argparse.Namespace) -> int:
    """``dsan explain pod``: 0; 1 when the sidecar or the cluster cannot answer; 2 for bad
    arguments."""
    try:
        ns, name = parse_pod(args.pod)
        if args.top_k < 1:
            raise ValueError(f"--top-k must be >= 1, got {args.top_k}")
        if not 0 < args.timeout < math.inf:
            raise ValueError(f"--timeout must be a finite number > 0, got {args.timeout}")
        url = urllib.parse.urlsplit(args.sidecar)
        if url.scheme not in ("http", "https") or not url.netloc:
            raise ValueError(f"--sidecar must be an http:// or https:// URL, got {args.sidecar!r}")
    except ValueError as exc:
        print(f"dsan explain pod: error: {exc}", file=sys.stderr)
        return 2
    try:
        info = read_pod(args.kubeconfig, ns, name) if args.kubeconfig else None
        doc = fetch(args.sidecar, ns, name, args.timeout)
    except RemoteError as exc:
        print(f"dsan explain pod: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(doc, indent=2) if args.json else table(doc, args.top_k, info))
    return 0


def _run(args: argparse.Namespace) -> int:
    from dsan.sim.openb import TraceError
    from dsan.sim.paths import TracesNotFound

    try:
        path = _explain(args)
    except (ValueError, TraceError, TracesNotFound, OSError) as exc:
        print(f"dsan explain {args.run}: error: {exc}", file=sys.stderr)
        return 2
    print(path)
    return 0


class RemoteError(Exception):
    """The sidecar or the cluster could not answer; the message says which and why."""


def parse_pod(ref: str) -> tuple[str, str]:
    """``NAMESPACE/NAME`` -> (namespace, name); ValueError otherwise."""
    ns, sep, name = ref.partition("/")
    if not sep or not ns or not name or "/" in name:
        raise ValueError(f"expected NAMESPACE/NAME, got {ref!r}")
    return ns, name


def fetch(sidecar: str, namespace: str, name: str, timeout_s: float = 30.0) -> dict[str, Any]:
    """The sidecar's explanation of ``namespace/name``; RemoteError with the sidecar's own
    message when it refuses (not scored, unexplainable, busy) or cannot be reached."""
    url = (f"{sidecar.rstrip('/')}/explain/{urllib.parse.quote(namespace, safe='')}/"
           f"{urllib.parse.quote(name, safe='')}")
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            body = resp.read()
    except urllib.error.HTTPError as exc:
        try:
            why = json.loads(exc.read()).get("error", "")
        except (ValueError, AttributeError):
            why = ""
        raise RemoteError(f"the sidecar at {sidecar} answered {exc.code}: "
                          f"{why or exc.reason}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise RemoteError(
            f"cannot reach the sidecar at {sidecar} ({reason}); in a cluster, forward its port "
            "first: kubectl -n <namespace> port-forward deploy/<release>-dsan-scheduler "
            "8888:8888") from None
    try:  # apart from the request: a bad URL or timeout is a ValueError too, not a bad answer
        doc = json.loads(body)
    except ValueError as exc:
        raise RemoteError(f"the sidecar at {sidecar} sent no JSON: {exc}") from None
    if not isinstance(doc, dict) or "decision_factors" not in doc:
        raise RemoteError(f"the sidecar at {sidecar} sent no explanation: {str(doc)[:200]}")
    return doc


def read_pod(kubeconfig: str, namespace: str, name: str) -> PodInfo:
    """The pod from the apiserver (raw JSON); RemoteError if it is not there or the apiserver
    cannot be reached."""
    from kubernetes import config  # base install; not at import time

    try:
        api = config.new_client_from_config(config_file=kubeconfig)
    except Exception as exc:  # a missing or unreadable kubeconfig
        raise RemoteError(f"cannot load kubeconfig {kubeconfig}: {exc}") from None
    from kubernetes import client

    try:
        # raw (not preloaded): the urllib3 response, whatever the method's annotation says
        resp: Any = client.CoreV1Api(api).read_namespaced_pod(
            name, namespace, _preload_content=False, _request_timeout=(5, 10))
        pod = json.loads(resp.data)
    except Exception as exc:
        status = getattr(exc, "status", None)
        if status == 404:
            raise RemoteError(f"pod {namespace}/{name} not found in the cluster") from None
        raise RemoteError(f"reading pod {namespace}/{name}: {exc}") from None
    finally:
        api.close()
    spec, meta = pod.get("spec") or {}, pod.get("metadata") or {}
    return PodInfo(str(spec.get("nodeName") or ""), str(spec.get("schedulerName") or ""),
                   str((meta.get("annotations") or {}).get(ANNOTATION_SCORED_BY, "")))


def _explain(args: argparse.Namespace) -> Path:
    if args.top_k < 1:
        raise ValueError(f"--top-k must be >= 1, got {args.top_k}")
    if args.decision < 0:
        raise ValueError(f"--decision must be >= 0, got {args.decision}")
    if args.run == "seed-table1" and args.hours is not None and not 0 < args.hours < math.inf:
        raise ValueError(f"--hours must be a finite number > 0, got {args.hours}")
    if args.policy not in EXPLAINABLE:
        raise ValueError(f"cannot explain policy {args.policy!r}: "
                         f"explainable policies are {', '.join(EXPLAINABLE)}")
    kwargs = {}
    shap_cfg = None
    if args.policy == "dsan":
        from threadpoolctl import threadpool_limits

        from dsan.model.artifact import DEFAULT_DIR, SchemaMismatch, read_manifest

        model_dir = args.model_dir or os.environ.get("DSAN_MODEL_DIR") or str(DEFAULT_DIR)
        try:
            read_manifest(model_dir)  # fail before replaying, not after
        except FileNotFoundError as exc:
            raise FileNotFoundError(f"{exc} (pass --model-dir, set DSAN_MODEL_DIR or train one "
                                    "with `dsan train`)") from None
        except SchemaMismatch as exc:
            raise ValueError(str(exc)) from None
        kwargs["model_dir"] = model_dir
        if args.threads < 1:
            raise ValueError(f"--threads must be >= 1, got {args.threads}")
        threadpool_limits(args.threads)
        shap_cfg = DSANShapConfig(args.background, args.permutations, args.shap_seed)
    try:  # before the replay, which can take minutes
        args.out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"--out {args.out}: cannot create the folder: "
                         f"{exc.strerror or exc}") from None
    if args.run == "openb":
        from dsan.sim import paths
        from dsan.sim.protocol import OpenbConfig

        pods = Path(args.pods)
        if pods.suffix != ".csv" and not pods.exists():
            pods = paths.openb_csv(f"openb_pod_list_{args.pods}.csv")
        nodes = Path(args.nodes) if args.nodes else paths.openb_csv(paths.DEFAULT_NODES)
        for what, p in (("pod", pods), ("node", nodes)):
            if not p.is_file():
                raise FileNotFoundError(f"{what} CSV not found: {p}")
        cfg = OpenbConfig(pods=pods, nodes=nodes, policy=args.policy, seed=args.seed,
                          tune=args.tune, tie_break=args.tie_break)
        decision = replay_openb(cfg, args.decision, **kwargs)
        workload = pods.stem.removeprefix("openb_pod_list_")
        stem = f"openb-{workload}-{args.policy}-seed{args.seed}-decision{args.decision}"
    else:
        decision = replay_scenario(args.scenario, args.policy, args.seed, args.decision,
                                   hours=args.hours, burst=args.burst, **kwargs)
        stem = f"{Path(args.scenario).stem}-{args.policy}-seed{args.seed}-decision{args.decision}"
    return write_report(explain(decision, shap_cfg), args.out, args.top_k, stem)
