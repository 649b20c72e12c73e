#!/usr/bin/env bash
# Generate the Python stubs of every contract under proto/ into dsan/api/gen/<pkg>_<ver>/.
# proto/<pkg>/<ver>/<file>.proto -> dsan/api/gen/<pkg>_<ver>/<file>_pb2{,_grpc}.py(i)
# Generated files are committed; tests/unit/api/test_proto_fresh.py fails when they drift.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
OUT=${1:-dsan/api/gen}
mkdir -p "$OUT"
touch "$OUT/__init__.py"
for dir in $(find proto -name '*.proto' -printf '%h\n' | sort -u); do
  rel=${dir#proto/}
  pkg=${rel//\//_}
  mkdir -p "$OUT/$pkg"
  touch "$OUT/$pkg/__init__.py"
  "$PY" -m grpc_tools.protoc -I "$dir" --python_out="$OUT/$pkg" --pyi_out="$OUT/$pkg" \
    --grpc_python_out="$OUT/$pkg" "$dir"/*.proto
  # protoc writes absolute sibling imports; make them package-relative.
  sed -i -E 's/^import ([a-z_0-9]+_pb2) as /from . import \1 as /' "$OUT/$pkg"/*_pb2_grpc.py "$OUT/$pkg"/*_pb2.py
done
