"""Where the public traces live: ``$DSAN_TRACES``, else ``<repo>/../shared/traces``."""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_NODES = "openb_node_list_gpu_node.csv"
DEFAULT_PODS = "openb_pod_list_default.csv"


class TracesNotFound(FileNotFoundError):
    pass


def traces_root() -> Path:
    env = os.environ.get("DSAN_TRACES")
    if env:
        root = Path(env)
        if not root.is_dir():
            raise TracesNotFound(f"DSAN_TRACES={env} is not a directory")
        return root
    repo = Path(__file__).resolve().parents[2]
    for cand in (repo.parent / "shared" / "traces", Path.cwd().parent / "shared" / "traces"):
        if cand.is_dir():
            return cand
    raise TracesNotFound(
        "public traces not found: set DSAN_TRACES or place them at "
        f"{repo.parent / 'shared' / 'traces'}"
    )


def openb_csv(name: str) -> Path:
    return traces_root() / "alibaba-gpu-v2023-openb" / "csv" / name


def published(name: str) -> Path:
    return traces_root() / "fgd-atc23-published-results" / name
