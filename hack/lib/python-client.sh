#!/usr/bin/env bash
# Installs the official Kubernetes Python client (test/clients/python/requirements.txt, from PyPI)
# into a virtualenv under _output/python, once; prints the virtualenv's python. A second run with
# the same requirements prints it without touching the network. The e2e tests call this.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=${OUT:-$ROOT/_output}
VENV=$OUT/python
REQ=$ROOT/test/clients/python/requirements.txt
PYTHON=${PYTHON:-python3}

key=$(sha256sum "$REQ" | cut -d' ' -f1)
if [ "$(cat "$VENV/.stamp" 2>/dev/null)" != "$key" ] || [ ! -x "$VENV/bin/python" ]; then
  echo ">> installing the Kubernetes Python client into $VENV (PyPI, once)" >&2
  rm -rf "$VENV"
  "$PYTHON" -m venv "$VENV" >&2
  "$VENV/bin/pip" install -q --disable-pip-version-check -r "$REQ" >&2
  echo "$key" >"$VENV/.stamp"
fi
echo "$VENV/bin/python"
