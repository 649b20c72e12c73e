"""Other projects' CRDs that the chart's optional objects need (prometheus-operator's
ServiceMonitor), read from the Go module cache at test time, never vendored into this
repository: `go mod download` fetches the module through the Go module proxy once."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import yaml

PROMETHEUS_OPERATOR = "github.com/prometheus-operator/prometheus-operator"
PROMETHEUS_OPERATOR_VERSION = "v0.85.0"


def module_dir(module: str, version: str) -> Path:
    proc = subprocess.run(
        [os.environ.get("GO", "go"), "mod", "download", "-json", f"{module}@{version}"],
        capture_output=True, text=True, env={**os.environ, "GOFLAGS": "-mod=mod"}, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"go mod download {module}@{version} failed:\n{proc.stderr[-2000:]}")
    return Path(json.loads(proc.stdout)["Dir"])


def prometheus_operator_crd(plural: str = "servicemonitors") -> dict[str, Any]:
    """prometheus-operator's CRD for ``plural`` (e.g. servicemonitors, podmonitors)."""
    root = module_dir(PROMETHEUS_OPERATOR, PROMETHEUS_OPERATOR_VERSION)
    path = root / "example" / "prometheus-operator-crd" / f"monitoring.coreos.com_{plural}.yaml"
    return dict(yaml.safe_load(path.read_text()))
