#!/usr/bin/env bash
# An environment with the base install only (`pip install .`: what `dsan serve` and
# `dsan deviceplugin` need, no torch), built once per dependency list under ~/.cache/dsan.
# Prints its interpreter's path last; checks that torch, torch-geometric and matplotlib are
# absent and reports the environment's size.
#   py=$(bash bench/serve_env.sh | tail -1)
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE="${DSAN_CACHE:-$HOME/.cache/dsan}"
key="$(sha1sum pyproject.toml | cut -c1-12)"
env="$CACHE/serve-venv-$key"
if [[ ! -x "$env/bin/dsan" ]]; then
  rm -rf "$env"
  python3.11 -m venv "$env"
  "$env/bin/pip" install -q --upgrade pip >&2
  "$env/bin/pip" install -q . >&2
fi
"$env/bin/python" - <<'PY' >&2
import importlib.util, sys
for m in ("torch", "torch_geometric", "matplotlib", "tensorboard"):
    if importlib.util.find_spec(m) is not None:
        sys.exit(f"serve env: {m} is installed")
print("serve env: no torch, torch-geometric, matplotlib or tensorboard")
PY
echo "serve env: $(du -sm "$env" | cut -f1) MiB at $env" >&2
echo "$env/bin/python"
