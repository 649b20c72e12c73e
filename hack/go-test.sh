#!/usr/bin/env bash
# Go unit tests of the scheduler plugin (scheduler-plugin/pkg/...), with the same toolchain,
# flags and caches as hack/control-plane-build.sh, so the packages it compiled are reused:
# GOMODCACHE and GOCACHE are Go's defaults (~/go/pkg/mod, ~/.cache/go-build).
# Cold (nothing compiled yet): minutes on 2 cores; warm: seconds. Extra args go to `go test`.
set -euo pipefail
cd "$(dirname "$0")/../scheduler-plugin"

GO="${GO:-go}"
gover="$($GO env GOVERSION)"
case "$gover" in
  go1.26*) ;;
  *) echo "go-test: need Go 1.26 (found $gover), as hack/control-plane-build.sh does" >&2; exit 1 ;;
esac

# Identical to control-plane-build.sh: the build cache is keyed on these, so keep them in step.
export CGO_ENABLED=0 GOMAXPROCS="${GOMAXPROCS:-2}" GOFLAGS="-trimpath -mod=readonly"
exec nice -n 5 "$GO" test -p 2 -count=1 "$@" ./pkg/...
