#!/usr/bin/env bash
# Debian packages that the integration and e2e tiers run for real. Idempotent and quick when
# everything is already installed.
set -euo pipefail
need=()
command -v etcd >/dev/null || need+=(etcd-server)
command -v prometheus >/dev/null || need+=(prometheus)
command -v protoc >/dev/null || need+=(protobuf-compiler)
if ((${#need[@]})); then
  echo "installing Debian packages: ${need[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
