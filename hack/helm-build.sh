#!/usr/bin/env bash
# Builds the real Helm v3 CLI from its Go module, once per machine, for tests/e2e/test_chart.py
# (helm lint / template / install on charts/dsan-scheduler). Output: $DSAN_CACHE/bin/helm-<version>/helm.
# A no-op (milliseconds) when cached. The last line on stdout is HELM=<path>
# (`--print` prints it without building).
set -euo pipefail

# v3.21.x pins k8s.io/client-go v0.36, the same minor as our control plane (v1.36.3), so its
# client-side schema knowledge matches the apiserver the e2e test installs the chart into.
HELM_VERSION="${HELM_VERSION:-v3.21.4}"
CACHE="${DSAN_CACHE:-$HOME/.cache/dsan}"
HELM_DIR="$CACHE/bin/helm-$HELM_VERSION"

if [[ "${1:-}" == "--print" ]]; then echo "HELM=$HELM_DIR/helm"; exit 0; fi

GO="${GO:-go}"
if [[ ! -x "$HELM_DIR/helm" ]]; then
  # Several test sessions may call this at once (control-plane-build.sh runs it): one builds,
  # the others wait for it instead of compiling the same thing again on two shared cores.
  mkdir -p "$CACHE/bin"
  exec 9>"$CACHE/bin/.helm-$HELM_VERSION.lock"
  flock 9
fi
if [[ ! -x "$HELM_DIR/helm" ]]; then
  gover="$($GO env GOVERSION)"
  case "$gover" in
    go1.26*) ;;
    *) echo "helm-build: need Go 1.26 (found $gover)" >&2; exit 1 ;;
  esac
  echo "helm-build: building helm $HELM_VERSION into $HELM_DIR (cold: a few minutes on 2 cores)" >&2
  tmp="$HELM_DIR.tmp.$$"; mkdir -p "$tmp"
  trap 'rm -rf "$tmp"' EXIT
  # Helm is its own module with its own pins: `go install pkg@version` builds it outside ours.
  # Two shared cores: cap parallelism and stay nice; static, stripped, reproducible paths.
  CGO_ENABLED=0 GOMAXPROCS="${GOMAXPROCS:-2}" GOFLAGS="-trimpath" GOBIN="$tmp" \
    nice -n 10 "$GO" install -p 2 -ldflags="-s -w" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
  rm -rf "$HELM_DIR"; mv "$tmp" "$HELM_DIR"   # atomic: a half-built dir never looks cached
  trap - EXIT
fi

echo "HELM=$HELM_DIR/helm"
