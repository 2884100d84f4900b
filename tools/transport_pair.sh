#!/usr/bin/env bash
# Runs a transport_test server and client as two processes on one host (the
# README's main job). Usage: tools/transport_pair.sh [build-dir] [flags...]
#
# Every flag is given to both sides (the client sends its test parameters to
# the server anyway); the script adds --server / --serverip=127.0.0.1 and, if
# no --oobport is given, picks a free port. Exit status: the client's, or the
# server's when the client succeeded. Both sides are bounded in time.
set -uo pipefail

BUILD=build
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then BUILD=$1; shift; fi
BIN="$BUILD/bin/transport_test"
if [ ! -x "$BIN" ]; then
  echo "transport_pair: $BIN not found; build first (make)" >&2
  exit 2
fi

port=""
duration=5
for a in "$@"; do
  case "$a" in
    --oobport=*) port=${a#--oobport=} ;;
    --duration_s=*) duration=${a#--duration_s=} ;;
    --serverip=* | --server | --server=*)
      echo "transport_pair: do not pass $a; the script sets it" >&2
      exit 2 ;;
  esac
done
if [ -z "$port" ]; then
  # A port nobody listens on, from a range away from the ephemeral one.
  for _ in $(seq 1 50); do
    cand=$((20000 + RANDOM % 10000))
    if ! ss -Hltn "sport = :$cand" 2>/dev/null | grep -q .; then
      port=$cand
      break
    fi
  done
  port=${port:-19999}
  set -- "$@" --oobport="$port"
fi

# Long enough for the run plus set-up and tear-down, never unbounded.
limit=$(awk -v d="$duration" 'BEGIN { printf "%d", d * 3 + 60 }')

slog=$(mktemp -t uccl-server.XXXXXX)
cleanup() {
  if [ -n "${spid:-}" ] && kill -0 "$spid" 2>/dev/null; then
    kill "$spid" 2>/dev/null
    sleep 0.5
    kill -9 "$spid" 2>/dev/null
  fi
  rm -f "$slog"
}
trap cleanup EXIT INT TERM

timeout -k 5 "$limit" "$BIN" --server "$@" >"$slog" 2>&1 &
spid=$!

# Wait (bounded) until the server listens.
for _ in $(seq 1 200); do
  grep -q "listening on port" "$slog" && break
  if ! kill -0 "$spid" 2>/dev/null; then
    echo "transport_pair: the server exited before listening:" >&2
    cat "$slog" >&2
    exit 3
  fi
  sleep 0.05
done

timeout -k 5 "$limit" "$BIN" --serverip=127.0.0.1 "$@"
crc=$?
wait "$spid"
src=$?
spid=""
echo "---- server output ----"
cat "$slog"
if [ "$crc" -ne 0 ]; then
  echo "transport_pair: client exited with $crc" >&2
  exit "$crc"
fi
if [ "$src" -ne 0 ]; then
  echo "transport_pair: server exited with $src" >&2
  exit "$src"
fi
exit 0
