#!/usr/bin/env bash
# Regenerates gen/scorer/v1 (Go stubs of proto/scorer/v1/scorer.proto, committed like the Python
# stubs). protoc-gen-go and protoc-gen-go-grpc are installed from the Go proxy into the cache.
set -euo pipefail
cd "$(dirname "$0")"
TOOLS="${DSAN_CACHE:-$HOME/.cache/dsan}/bin/tools"
PROTOBUF_VERSION="$(go list -m -f '{{.Version}}' google.golang.org/protobuf)"
[[ -x "$TOOLS/protoc-gen-go" ]] || GOBIN="$TOOLS" go install "google.golang.org/protobuf/cmd/protoc-gen-go@$PROTOBUF_VERSION"
[[ -x "$TOOLS/protoc-gen-go-grpc" ]] || GOBIN="$TOOLS" go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.5.1
MODULE=github.com/dsan-scheduler/dsan/scheduler-plugin
PATH="$TOOLS:$PATH" protoc -I ../proto \
  --go_out=. --go_opt=module=$MODULE --go-grpc_out=. --go-grpc_opt=module=$MODULE \
  ../proto/scorer/v1/scorer.proto
