#!/usr/bin/env bash
# Sourced by helm.sh, promtool.sh and clients.sh: builds a Go program from the Go module proxy.
#
# build_go_tool NAME MODULE VERSION PACKAGE [GO BUILD FLAGS...]
#   builds PACKAGE (a main package of MODULE) at VERSION into $OUT/bin/NAME, once: a throwaway
#   module under $OUT/build/NAME requires MODULE@VERSION, then go build. VERSION, kept in
#   $OUT/bin/.NAME.version, is the cache key: another version rebuilds, the same one returns at
#   once. The flags go to go build as they are (a version stamp: -ldflags "-X ...").

build_go_tool() {
  local name=$1 module=$2 version=$3 pkg=$4
  shift 4
  local bin=$OUT/bin/$name stamp=$OUT/bin/.$name.version dir=$OUT/build/$name
  if [ -x "$bin" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$version" ]; then
    return 0
  fi
  echo ">> building $name ($module $version) from the Go module proxy (a few minutes, once)" >&2
  rm -rf "$dir" && mkdir -p "$dir" "$OUT/bin"
  (
    cd "$dir"
    printf 'module local/%sbuild\n\ngo 1.26\n' "$name" >go.mod
    printf '//go:build tools\n\npackage tools\n\nimport _ "%s"\n' "$pkg" >tools.go
    # go get lists every module it adds on stderr: shown only when it fails.
    local log
    log=$(go get "$module@$version" 2>&1 && go mod tidy 2>&1) || {
      echo "$log" >&2
      exit 1
    }
    go build "$@" -o "$bin.tmp" "$pkg"
  )
  mv "$bin.tmp" "$bin"
  echo "$version" >"$stamp"
}
