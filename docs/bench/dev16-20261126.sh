#!/usr/bin/env bash
# The 16-CPU device run of issue 31 (2026-11-26), as sent: one command, every sub-run bounded by
# `timeout`, outputs under $OUT. Unpacks the bundle of ../shared/tools/offline-bench-bundle.sh.
# Priority order: (A) Spark fleet, both ways, at a LIST rate where kube-apiserver on 16 CPUs falls
# behind; (B) the same fleet direct at index-apiserver with --consistent-read-revision-interval
# 0 and 5ms (and 20ms again, if time is left): LIST latency and kube-apiserver's CPU.
set -u
T0=$(date +%s); END=$((T0 + ${BUDGET_S:-560}))
mkdir -p _output/bin && tar xJf _output/devbin.tar.xz -C _output/bin || exit 1
B=_output/bin/bench; MD=$OUT/bench.md; LOG=$OUT/bench.log; touch "$MD"
{ nproc; free -g; uptime; } >"$LOG"
# Spark fleet common to every sub-run.
FLEET=(-mode spark -spark-drivers "${DRIVERS:-2000}" -spark-executors 10 -spark-list-period "${PERIOD:-1s}"
  -fleet-duration "${DUR:-30s}" -fleet-create-rate "${CREATE:-1000}" -fleet-max-rss-mib 60000 -markdown "$MD")
cleanup() { # the stack a killed bench left (its PID files), so the next sub-run has the cores
  for p in _output/bench/stack-*/pids/*.pid; do [ -f "$p" ] && kill -9 "$(cat "$p")" 2>/dev/null; done
  rm -rf _output/bench/stack-*; }
sub() { # sub NAME PLANNED_S ARGS...: runs if the budget allows, bounded by what is left
  local name=$1 planned=$2; shift 2
  local left=$((END - $(date +%s) - 25))
  if [ "$left" -lt "$((planned * 3 / 4))" ]; then echo "== $name: skipped ($left s left, planned $planned)" >>"$LOG"; return; fi
  local lim=$((left < planned + 60 ? left : planned + 60))
  echo "== $name: $(date -u +%T) limit ${lim}s: bench $*" >>"$LOG"
  timeout -k 20 "$lim" "$B" "$@" -json "$OUT/$name.json" >>"$LOG" 2>&1; echo "== $name: rc $? at $(date -u +%T), $(( $(date +%s) - T0 )) s" >>"$LOG"
  cleanup; }
sub spark-a 260 "${FLEET[@]}" -ways kube,direct -write-floors=false
sub spark-rv0 120 "${FLEET[@]}" -ways direct -write-floors=false -fresh-kube-apiserver=false -index-apiserver-flags=--consistent-read-revision-interval=0
sub spark-rv5ms 120 "${FLEET[@]}" -ways direct -write-floors=false -fresh-kube-apiserver=false -index-apiserver-flags=--consistent-read-revision-interval=5ms
sub spark-rv20ms 120 "${FLEET[@]}" -ways direct -write-floors=false -fresh-kube-apiserver=false -index-apiserver-flags=--consistent-read-revision-interval=20ms
rm -f "$OUT"/spark-rv*.png
echo "total $(( $(date +%s) - T0 )) s" >>"$LOG"
