"""A pod's explanation from a running sidecar (``GET /explain/<namespace>/<pod>``) and the pod
as the cluster has it, for ``dsan explain pod``; base install only (urllib, kubernetes).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from dsan.api.types import ANNOTATION_SCORED_BY

DEFAULT_SIDECAR = "http://127.0.0.1:8888"


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
            doc = json.loads(resp.read())
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
    except ValueError as exc:
        raise RemoteError(f"the sidecar at {sidecar} sent no JSON: {exc}") from None
    if not isinstance(doc, dict) or "decision_factors" not in doc:
        raise RemoteError(f"the sidecar at {sidecar} sent no explanation: {str(doc)[:200]}")
    return doc


@dataclass(frozen=True)
class PodInfo:
    """Where the pod is bound, by which scheduler, and the sidecar's annotation."""

    node: str
    scheduler: str
    scored_by: str


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


def table(doc: dict[str, Any], top_k: int = 10, pod: PodInfo | None = None) -> str:
    """The explanation for a terminal: the decision, the check, the top factors."""
    factors = doc["decision_factors"]
    reply = doc.get("reply") or {}
    top = reply.get("max", "?")
    lines = [f"pod {doc['task_id']}"]
    if pod is not None:
        lines[0] += (f": bound to {pod.node or '(not bound)'} by {pod.scheduler or '?'}, "
                     f"{ANNOTATION_SCORED_BY}={pod.scored_by or '(none)'}")
    lines += [
        f"recommended {doc['recommended_node']} ({reply.get('recommended', '?')}/{top}), "
        f"runner-up {doc['runner_up']} ({reply.get('runner_up', '?')}/{top}), "
        f"{doc['candidates']} candidates",
        f"policy {doc['policy']}: {doc['method']}",
        f"score {doc['score']:.6g} = base value {doc['base_value']:.6g} + impacts "
        f"{sum(f['impact'] for f in factors):+.6g}",
        "",
    ]
    rows = [("feature", "value", "impact", "runner-up", "impact", "unit")]
    for f in factors[:top_k]:
        rows.append((f["feature"], f"{f['value']:.4g}", f"{f['impact']:+.4f}",
                     f"{f['runner_up_value']:.4g}", f"{f['runner_up_impact']:+.4f}",
                     f["unit"]))
    rest = factors[top_k:]
    if rest:
        rows.append((f"({len(rest)} more)", "", f"{sum(f['impact'] for f in rest):+.4f}", "",
                     f"{sum(f['runner_up_impact'] for f in rest):+.4f}", ""))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    for r in rows:
        cells = [r[0].ljust(widths[0]), *(c.rjust(w) for c, w in zip(r[1:5], widths[1:],
                                                                       strict=True)), r[5]]
        lines.append("  ".join(cells).rstrip())
    for c in doc.get("context") or []:
        lines.append(f"  {c['name']}: {c['value']:.4g} vs {c['runner_up_value']:.4g} "
                     f"({c['unit']})")
    lines += ["", *(f"note: {n}" for n in doc.get("notes") or ())]
    return "\n".join(lines)
