#!/usr/bin/env bash
# `make cluster` / `make cluster-down`: the DSAN stack on 127.0.0.1 (etcd, kube-apiserver, the
# default kube-scheduler, the dsan-scheduler, the sidecar and kwok with GPU nodes), running in
# the background until `cluster.sh down`. State, kubeconfig and logs: $DSAN_CLUSTER_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR="${DSAN_CLUSTER_DIR:-${TMPDIR:-/tmp}/dsan-cluster}"
PY="${PY:-.venv/bin/python}"
NODES="${NODES:-50}"

up() {
  if [[ -f "$DIR/pid" ]] && kill -0 "$(cat "$DIR/pid")" 2>/dev/null; then
    echo "cluster already running (pid $(cat "$DIR/pid")); env in $DIR/env"; cat "$DIR/env"; return 0
  fi
  rm -rf "$DIR"; mkdir -p "$DIR"
  setsid nohup "$PY" -m tests.support.localcluster --dir "$DIR" --nodes "$NODES" \
    >"$DIR/cluster.log" 2>&1 </dev/null &
  echo $! >"$DIR/pid"
  for _ in $(seq 1 600); do
    [[ -f "$DIR/ready" ]] && break
    if ! kill -0 "$(cat "$DIR/pid")" 2>/dev/null; then
      echo "cluster failed to start:"; tail -30 "$DIR/cluster.log"; exit 1
    fi
    sleep 0.5
  done
  [[ -f "$DIR/ready" ]] || { echo "cluster not ready after 300 s; see $DIR/cluster.log"; exit 1; }
  echo "DSAN cluster up ($NODES kwok nodes). Stop with: make cluster-down"
  sed 's/^/  /' "$DIR/env"
  echo "  e.g. KUBECONFIG=\$(sed -n 's/^KUBECONFIG=//p' $DIR/env) kubectl get nodes"
}

down() {
  if [[ ! -f "$DIR/pid" ]]; then echo "no cluster state in $DIR"; return 0; fi
  pid="$(cat "$DIR/pid")"
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid"
    for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
  fi
  rm -rf "$DIR"
  echo "cluster stopped"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  *) echo "usage: $0 up|down" >&2; exit 2 ;;
esac
