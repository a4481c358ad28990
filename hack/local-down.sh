#!/usr/bin/env bash
# Stops what hack/local-up.sh started, by PID, newest first.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DIR=${LOCAL_DIR:-$ROOT/_output/local}
for name in index-apiserver index-apiserver-2 kube-apiserver etcd; do
  f=$DIR/pids/$name
  [ -f "$f" ] || continue
  pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid"
    for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
    echo "stopped $name ($pid)"
  fi
  rm -f "$f"
done
