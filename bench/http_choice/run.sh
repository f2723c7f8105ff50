#!/usr/bin/env bash
# Runs one measurement: run.sh BIN_DIR beast|httplib CONNS EVENTS [SERVER_THREADS [seq]]
set -euo pipefail
dir=$1 kind=$2 conns=$3 events=$4 threads=${5:-}
port=$((18000 + RANDOM % 1000))
ulimit -n 8192
"$dir/${kind}_sse" "$port" "$events" $threads > /dev/null &
pid=$!
sleep 0.5
"$dir/sse_load" "$port" "$conns" "$events" "$pid" ${6:-}
kill "$pid"; wait "$pid" 2>/dev/null || true
