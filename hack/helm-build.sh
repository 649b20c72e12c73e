#!/usr/bin/env bash
# Builds the chart's and the images' test tools from their Go modules, once per machine, for
# tests/e2e/test_chart*.py and test_images.py, each into $DSAN_CACHE/bin/<tool>-<version>/:
#   helm         the real Helm v3 CLI (lint / template / install of charts/dsan-scheduler)
#   kubeconform  the rendered manifests against the apiserver's own schemas
#   crane        go-containerregistry's CLI: `crane registry serve`, a registry on loopback
#                that the images are pushed to as docs/helm.md tells users to
# A no-op (milliseconds) when cached. The last lines on stdout are HELM=, KUBECONFORM= and
# CRANE=<path> (`--print` prints them without building).
set -euo pipefail

# v3.21.x pins k8s.io/client-go v0.36, the same minor as our control plane (v1.36.3), so its
# client-side schema knowledge matches the apiserver the e2e test installs the chart into.
HELM_VERSION="${HELM_VERSION:-v3.21.4}"
CACHE="${DSAN_CACHE:-$HOME/.cache/dsan}"
HELM_DIR="$CACHE/bin/helm-$HELM_VERSION"
KUBECONFORM_VERSION="${KUBECONFORM_VERSION:-v0.7.0}"
KUBECONFORM_DIR="$CACHE/bin/kubeconform-$KUBECONFORM_VERSION"
# The go-containerregistry release images/assemble builds against (images/assemble/go.mod).
CRANE_VERSION="${CRANE_VERSION:-v0.22.1}"
CRANE_DIR="$CACHE/bin/crane-$CRANE_VERSION"

print_paths() {
  echo "HELM=$HELM_DIR/helm"
  echo "KUBECONFORM=$KUBECONFORM_DIR/kubeconform"
  echo "CRANE=$CRANE_DIR/crane"
}
if [[ "${1:-}" == "--print" ]]; then print_paths; exit 0; fi

GO="${GO:-go}"
if [[ ! -x "$HELM_DIR/helm" || ! -x "$KUBECONFORM_DIR/kubeconform" || ! -x "$CRANE_DIR/crane" ]]; then
  # Several test sessions may call this at once (control-plane-build.sh runs it): one builds,
  # the others wait for it instead of compiling the same thing again on two shared cores.
  mkdir -p "$CACHE/bin"
  exec 9>"$CACHE/bin/.chart-tools.lock"
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

# tool NAME DIR PACKAGE@VERSION: `go install` it into DIR unless it is there.
tool() {
  local name="$1" dir="$2" pkg="$3" tmp
  [[ -x "$dir/$name" ]] && return 0
  echo "helm-build: building $pkg into $dir" >&2
  tmp="$dir.tmp.$$"; mkdir -p "$tmp"
  CGO_ENABLED=0 GOMAXPROCS="${GOMAXPROCS:-2}" GOFLAGS="-trimpath" GOBIN="$tmp" \
    nice -n 10 "$GO" install -p 2 -ldflags="-s -w" "$pkg" || { rm -rf "$tmp"; return 1; }
  rm -rf "$dir"; mv "$tmp" "$dir"
}
tool kubeconform "$KUBECONFORM_DIR" "github.com/yannh/kubeconform/cmd/kubeconform@$KUBECONFORM_VERSION"
tool crane "$CRANE_DIR" "github.com/google/go-containerregistry/cmd/crane@$CRANE_VERSION"

print_paths
