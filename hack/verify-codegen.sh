#!/usr/bin/env bash
# Fails when generated code is out of date: regenerates into a scratch copy of
# the tree and compares.
set -o errexit -o nounset -o pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# Copy the tracked and untracked-but-not-ignored files, not _output/.
(cd "$ROOT" && git ls-files -co --exclude-standard -z | xargs -0 cp -P --parents -t "$TMP")
(cd "$TMP" && hack/update-codegen.sh >/dev/null)

status=0
for dir in pkg artifacts; do
  [[ -d "$ROOT/$dir" ]] || continue
  if ! diff -Nqr "$ROOT/$dir" "$TMP/$dir" >/dev/null; then
    echo "generated files under $dir are out of date; run hack/update-codegen.sh:" >&2
    diff -Nr "$ROOT/$dir" "$TMP/$dir" | head -50 >&2 || true
    status=1
  fi
done
exit $status
