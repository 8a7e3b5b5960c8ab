#!/usr/bin/env bash
# PID 1 of the HBase container (docker/hbase.Dockerfile): starts standalone HBase and its
# Thrift gateway (scripts/hbase start), shows the master's log, and on SIGTERM or SIGINT
# (docker stop, Ctrl-C) stops them cleanly (scripts/hbase stop: TERM, then KILL after 20 s
# each) before it exits 0. Give docker stop the time for it: compose sets
# stop_grace_period, `docker run` takes --stop-timeout 60. When HBase dies on its own the
# script exits 1, so that the container's restart policy sees it.
#
# Environment: TSD_HBASE_SCRIPT (default scripts/hbase), TSD_HBASE_VAR (default
# /var/lib/hbase), TSD_HBASE_WATCH_INTERVAL (seconds between liveness checks, default 5).
set -euo pipefail

HBASE=${TSD_HBASE_SCRIPT:-scripts/hbase}
LOG=${TSD_HBASE_VAR:-/var/lib/hbase}/logs/master.log
INTERVAL=${TSD_HBASE_WATCH_INTERVAL:-5}
tail_pid=
sleep_pid=

finish() { # exit status
  trap - TERM INT
  # Every background child, not only those whose pid was recorded: a signal can land
  # between `cmd &` and the `$!` assignment, and an unkilled tail would block `wait`.
  local children
  children=$(jobs -p)
  if [ -n "$children" ]; then kill $children 2>/dev/null || true; fi
  wait 2>/dev/null || true
  exit "$1"
}

on_signal() {
  echo "hbase-entrypoint: stopping HBase" >&2
  "$HBASE" stop || true
  finish 0
}

trap on_signal TERM INT
"$HBASE" start
tail -n 0 -F "$LOG" 2>/dev/null &
tail_pid=$!
# Check that HBase lives; `wait` returns at once when a trapped signal arrives.
while "$HBASE" status >/dev/null 2>&1; do
  sleep "$INTERVAL" &
  sleep_pid=$!
  wait "$sleep_pid" || true
  sleep_pid=
done
echo "hbase-entrypoint: HBase is no longer running" >&2
finish 1
