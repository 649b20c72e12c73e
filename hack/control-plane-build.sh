#!/usr/bin/env bash
# Builds the control-plane binaries the e2e tier and `make cluster` run for real, once per machine:
#   kube-apiserver, kube-scheduler  from scheduler-plugin/ (k8s.io/kubernetes pinned in go.mod)
#   kwok                            from sigs.k8s.io/kwok/cmd/kwok at $KWOK_VERSION
# Output goes to $DSAN_CACHE/bin/<key>/ where the key names the version and, for our own module,
# a hash of its sources, so a cached build is reused until the pin or our Go code changes.
# A no-op (seconds) when everything is cached. The last lines on stdout are KEY=PATH pairs that
# tests/support/controlplane.py reads (`--print` prints them without building).
set -euo pipefail
cd "$(dirname "$0")/.."

K8S_VERSION=v1.36.3   # must match scheduler-plugin/go.mod
KWOK_VERSION=v0.8.0
CACHE="${DSAN_CACHE:-$HOME/.cache/dsan}"

# Go 1.27 turns on GOEXPERIMENT=jsonv2, which breaks the apiserver's /openapi output.
GO="${GO:-go}"
gover="$($GO env GOVERSION)"
case "$gover" in
  go1.26*) ;;
  *) echo "control-plane-build: need Go 1.26 (found $gover; 1.27's jsonv2 breaks kube-apiserver's OpenAPI)" >&2; exit 1 ;;
esac

src_hash="$(cat scheduler-plugin/go.mod scheduler-plugin/go.sum $(find scheduler-plugin -name '*.go' ! -name '*_test.go' | sort) | sha1sum | cut -c1-12)"
K8S_DIR="$CACHE/bin/k8s-$K8S_VERSION-$src_hash"
KWOK_DIR="$CACHE/bin/kwok-$KWOK_VERSION"

print_paths() {
  echo "KUBE_APISERVER=$K8S_DIR/kube-apiserver"
  echo "KUBE_SCHEDULER=$K8S_DIR/kube-scheduler"
  echo "KWOK=$KWOK_DIR/kwok"
  echo "KWOK_STAGES=$KWOK_DIR/stages.yaml"
  echo "ETCD=$(command -v etcd || echo /usr/bin/etcd)"
}
if [[ "${1:-}" == "--print" ]]; then print_paths; exit 0; fi

# Two cores and ~24 GB shared with other work: cap compiler parallelism, keep binaries small.
export CGO_ENABLED=0 GOMAXPROCS="${GOMAXPROCS:-2}" GOFLAGS="-trimpath -mod=readonly"
LDFLAGS="-s -w"

if [[ ! -x "$K8S_DIR/kube-apiserver" || ! -x "$K8S_DIR/kube-scheduler" ]]; then
  echo "control-plane-build: building kube-apiserver + kube-scheduler $K8S_VERSION into $K8S_DIR (cold: ~5-8 min on 2 cores)" >&2
  tmp="$K8S_DIR.tmp.$$"; mkdir -p "$tmp"
  (cd scheduler-plugin && nice -n 5 "$GO" build -p 2 -ldflags="$LDFLAGS" -o "$tmp/" ./cmd/kube-apiserver ./cmd/kube-scheduler)
  rm -rf "$K8S_DIR"; mv "$tmp" "$K8S_DIR"   # atomic: a half-built dir never looks cached
fi

if [[ ! -x "$KWOK_DIR/kwok" ]]; then
  echo "control-plane-build: building kwok $KWOK_VERSION into $KWOK_DIR" >&2
  tmp="$KWOK_DIR.tmp.$$"; mkdir -p "$tmp"
  # kwok is its own module with its own pins; `go install pkg@version` builds it outside ours.
  GOBIN="$tmp" GOFLAGS="-trimpath" nice -n 5 "$GO" install -p 2 -ldflags="$LDFLAGS" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
  # kwok runs no lifecycle without Stage objects. Use upstream's "fast" node and pod stages from
  # the module we just built (read from the module cache at build time, never vendored here):
  # nodes turn Ready at once, bound pods turn Running, deleted pods go away.
  kdir="$("$GO" mod download -json "sigs.k8s.io/kwok@$KWOK_VERSION" | sed -n 's/.*"Dir": "\(.*\)",/\1/p')"
  for f in node/fast/node-initialize.yaml pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
    echo "---"; cat "$kdir/kustomize/stage/$f"
  done > "$tmp/stages.yaml"
  rm -rf "$KWOK_DIR"; mv "$tmp" "$KWOK_DIR"
fi

bash hack/helm-build.sh >&2   # the helm CLI for tests/e2e/test_chart.py (no-op when cached)
print_paths
