#!/usr/bin/env bash
# `make images`: the three container images, built here without a registry or a Docker daemon.
#   localhost/dsan-sidecar:<version>        `dsan serve`        (images/python.Containerfile)
#   localhost/dsan-deviceplugin:<version>   `dsan deviceplugin` (images/python.Containerfile)
#   localhost/dsan-kube-scheduler:<k8s>     our kube-scheduler build with the DSAN plugins
# and localhost/kube-scheduler-upstream:<k8s>, the stock kube-scheduler for the e2e tier's check
# that the chart's extender mode runs on the upstream image.
# Python images: podman build, FROM two Debian bookworm bases made by mmdebstrap and imported
# (no registry pull). The scheduler image: a static Go binary in a one-layer image written by
# images/assemble (go-containerregistry) and loaded into podman by skopeo.
# Heavy inputs are cached under $DSAN_CACHE/images by content hash (the base tars, the
# scheduler binary, the assemble tool), and an image whose inputs did not change is not rebuilt,
# so a second run takes seconds. `--print` prints the image names without building;
# `--refresh-base` rebuilds the Debian bases (new security updates). The last lines on stdout
# are NAME=IMAGE pairs (tests/support/images.py reads them).
set -euo pipefail
cd "$(dirname "$0")/.."

CACHE="${DSAN_CACHE:-$HOME/.cache/dsan}"
DIR="$CACHE/images"
VERSION="$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml | head -1)"
K8S_VERSION=v1.36.3   # must match scheduler-plugin/go.mod and hack/control-plane-build.sh
SUITE=bookworm
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
SIDECAR="localhost/dsan-sidecar:$VERSION"
DEVICEPLUGIN="localhost/dsan-deviceplugin:$VERSION"
SCHEDULER="localhost/dsan-kube-scheduler:$K8S_VERSION"
UPSTREAM="localhost/kube-scheduler-upstream:$K8S_VERSION"

print_names() {
  echo "SIDECAR=$SIDECAR"
  echo "DEVICEPLUGIN=$DEVICEPLUGIN"
  echo "SCHEDULER=$SCHEDULER"
  echo "UPSTREAM_SCHEDULER=$UPSTREAM"
  echo "CONTAINERS_CONF=$DIR/containers.conf"
}
if [[ "${1:-}" == "--print" ]]; then print_names; exit 0; fi
REFRESH=0; [[ "${1:-}" == "--refresh-base" ]] && REFRESH=1

log() { echo "images: $*" >&2; }

# --- tools ----------------------------------------------------------------------------------
need=()
for t in podman:podman mmdebstrap:mmdebstrap skopeo:skopeo runc:runc newuidmap:uidmap; do
  command -v "${t%%:*}" >/dev/null || need+=("${t#*:}")
done
if ((${#need[@]})); then
  log "installing Debian packages: ${need[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
mkdir -p "$DIR"
# One build at a time per machine (sessions share the cache and podman's image names).
exec 9>"$DIR/.lock"
flock 9
# crun fails on this kind of host (cgroup v1 with a hybrid unified mount): use runc, and give
# build steps sane ulimits (podman's defaults come from a systemd that is not running here).
cat >"$DIR/containers.conf" <<'EOF'
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]
[engine]
runtime = "runc"
EOF
export CONTAINERS_CONF="$DIR/containers.conf"

# --- Debian bases (mmdebstrap -> tar -> podman import), cached by what goes into them -------
EXCLUDES=(--dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*'
          --dpkgopt='path-exclude=/usr/share/info/*' --dpkgopt='path-exclude=/usr/share/locale/*'
          --dpkgopt='path-include=/usr/share/doc/*/copyright')
# usr-merge by mmdebstrap's hook rather than the usrmerge package, which pulls in perl (~50 MB).
MMDEBSTRAP=(mmdebstrap --quiet --variant=essential --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr
            "${EXCLUDES[@]}" --format=tar)

# base NAME PACKAGES: echoes the local tag of a Debian base holding PACKAGES.
base() {
  local name="$1" pkgs="$2" key tar tag
  key="$(printf '%s\n' "${MMDEBSTRAP[*]}" "$SUITE" "$MIRROR" "$pkgs" | sha1sum | cut -c1-12)"
  tar="$DIR/base-$name-$key.tar"; tag="localhost/dsan-base-$name:$key"
  if [[ $REFRESH == 1 || ! -s "$tar" ]]; then
    log "building the Debian $SUITE base '$name' ($pkgs) with mmdebstrap (cold: ~1.5 min)"
    "${MMDEBSTRAP[@]}" --include="$pkgs" "$SUITE" "$tar.tmp" "$MIRROR" >&2
    mv "$tar.tmp" "$tar"
    podman rmi -f "$tag" >/dev/null 2>&1 || true
    # Bases of an older package list are not used again: their tars and tags go.
    find "$DIR" -maxdepth 1 -name "base-$name-*.tar" ! -name "$(basename "$tar")" -delete
    podman images --format '{{.Repository}}:{{.Tag}}' "localhost/dsan-base-$name" \
      | grep -v -x -F "$tag" | xargs -r podman rmi >/dev/null 2>&1 || true
  fi
  if ! podman image exists "$tag"; then
    podman import --quiet --change 'CMD ["/bin/bash"]' "$tar" "$tag" >/dev/null
  fi
  echo "$tag"
}
RUNTIME_BASE="$(base runtime python3,libstdc++6,ca-certificates)"
BUILD_BASE="$(base build python3,python3-venv,python3-dev,gcc,libc6-dev,ca-certificates)"

# --- the Python images ------------------------------------------------------------------------
# The context holds only what the package build reads (tracked and untracked-but-not-ignored
# files, so an uncommitted change is built too), plus the host's extra CA certificates for pip.
ctx="$(mktemp -d "$DIR/context.XXXXXX")"
trap 'rm -rf "$ctx"' EXIT
while IFS= read -r -d '' f; do if [[ -e "$f" ]]; then printf '%s\0' "$f"; fi; done \
  < <(git ls-files -z -co --exclude-standard -- pyproject.toml setup.py README.md dsan sidecar deviceplugin) \
  | tar --null -T - -cf - | tar -xf - -C "$ctx"
cp images/python.Containerfile "$ctx/Containerfile"
ctx_hash="$( (cd "$ctx" && find . -type f -print0 | sort -z | xargs -0 sha1sum; echo "$RUNTIME_BASE $BUILD_BASE") | sha1sum | cut -c1-12)"
mkdir -p "$ctx/ca"
cp /usr/local/share/ca-certificates/*.crt "$ctx/ca/" 2>/dev/null || true

built_from() { podman image inspect --format '{{index .Config.Labels "io.dsan.inputs"}}' "$1" 2>/dev/null || true; }

for target in sidecar deviceplugin; do
  image="$SIDECAR"; [[ $target == deviceplugin ]] && image="$DEVICEPLUGIN"
  if [[ "$(built_from "$image")" == "$ctx_hash" ]]; then
    log "$image is up to date (inputs $ctx_hash)"; continue
  fi
  log "building $image (podman build --target $target)"
  podman build --quiet --layers --target "$target" \
    --build-arg "BUILD_BASE=$BUILD_BASE" --build-arg "RUNTIME_BASE=$RUNTIME_BASE" \
    --label "io.dsan.inputs=$ctx_hash" --label "org.opencontainers.image.version=$VERSION" \
    -t "$image" -f "$ctx/Containerfile" "$ctx" >/dev/null
done

# --- the scheduler images ---------------------------------------------------------------------
# Same flags as hack/control-plane-build.sh, so Go's build cache is shared and only the link
# step runs here; the version is stamped in (kube-scheduler --version, its metrics).
export CGO_ENABLED=0 GOMAXPROCS="${GOMAXPROCS:-2}" GOFLAGS="-trimpath -mod=readonly"
GO="${GO:-go}"
tool_hash="$(cat images/assemble/go.mod images/assemble/go.sum images/assemble/*.go | sha1sum | cut -c1-12)"
assemble="$CACHE/bin/assemble-$tool_hash/assemble"
if [[ ! -x "$assemble" ]]; then
  log "building images/assemble into $(dirname "$assemble")"
  mkdir -p "$(dirname "$assemble")"
  (cd images/assemble && "$GO" build -ldflags="-s -w" -o "$assemble.tmp" . && mv "$assemble.tmp" "$assemble")
fi
src_hash="$(cat scheduler-plugin/go.mod scheduler-plugin/go.sum $(find scheduler-plugin -name '*.go' ! -name '*_test.go' | sort) | sha1sum | cut -c1-12)"

# go_image IMAGE NAME PACKAGE DESCRIPTION: build PACKAGE (in scheduler-plugin's module) once per
# source hash and load a one-layer image of it as IMAGE unless podman has that very digest.
go_image() {
  local image="$1" name="$2" pkg="$3" what="$4" bin layout digest tmp v minor ldflags
  bin="$DIR/$name-$K8S_VERSION-$src_hash/kube-scheduler"
  if [[ ! -x "$bin" ]]; then
    log "building $what into $(dirname "$bin")"
    v="k8s.io/component-base/version"
    minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"
    ldflags="-s -w -X $v.gitVersion=$K8S_VERSION -X $v.gitMajor=1 -X $v.gitMinor=$minor -X $v.gitTreeState=clean"
    tmp="$(dirname "$bin").tmp.$$"; mkdir -p "$tmp"
    (cd scheduler-plugin && nice -n 5 "$GO" build -p 2 -ldflags="$ldflags" -o "$tmp/kube-scheduler" "$pkg")
    rm -rf "$(dirname "$bin")"; mv "$tmp" "$(dirname "$bin")"
    # Builds of older sources are not used again.
    find "$DIR" -maxdepth 1 -type d -name "$name-$K8S_VERSION-*" ! -name "$(basename "$(dirname "$bin")")" \
      -exec rm -rf {} +
  fi
  layout="$DIR/layout-$name"
  digest="$("$assemble" -out "$layout" -ref "$K8S_VERSION" \
    -add "$bin=/usr/local/bin/kube-scheduler" -user-name nonroot \
    -entrypoint '["/usr/local/bin/kube-scheduler"]' \
    -label "org.opencontainers.image.title=$name" \
    -label "org.opencontainers.image.description=$what" \
    -label "org.opencontainers.image.version=$K8S_VERSION")"
  if [[ "$(podman image inspect --format '{{.Digest}}' "$image" 2>/dev/null || true)" == "$digest" ]]; then
    log "$image is up to date ($digest)"
  else
    log "loading $image into podman"
    skopeo copy --quiet "oci:$layout:$K8S_VERSION" "containers-storage:$image" >&2
  fi
}
go_image "$SCHEDULER" dsan-kube-scheduler ./cmd/kube-scheduler \
  "kube-scheduler $K8S_VERSION with the DSANScore plugin"
# The upstream kube-scheduler (no plugin of ours), as registry.k8s.io/kube-scheduler ships it:
# what the e2e tier runs the chart's extender mode with, to show it needs nothing of ours.
go_image "$UPSTREAM" kube-scheduler-upstream k8s.io/kubernetes/cmd/kube-scheduler \
  "upstream kube-scheduler $K8S_VERSION (extender-mode check)"

for image in "$SIDECAR" "$DEVICEPLUGIN" "$SCHEDULER" "$UPSTREAM"; do
  size="$(podman image inspect --format '{{.Size}}' "$image")"
  log "$(awk -v i="$image" -v s="$size" 'BEGIN { printf "%-40s %6.1f MB", i, s / 1e6 }')"
done
print_names
