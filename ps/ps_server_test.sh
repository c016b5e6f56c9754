#!/bin/bash
# Smoke test of the ps_server binary: bad flags exit 2; it prints its
# listening line, writes its port file, and exits 0 on SIGTERM.
set -u
BIN="$1"
TMP="${TEST_TMPDIR:-$(mktemp -d)}"

fail() { echo "FAIL: $*"; exit 1; }

for args in "--bogus" "--address=nope" "--address" "extra" "--max_memory_bytes=-1" \
    "--data_plane_port=-2" "--data_plane_port=65536"; do
  "$BIN" $args >/dev/null 2>&1
  rc=$?
  [[ $rc -eq 2 ]] || fail "ps_server $args exited $rc, want 2"
done

"$BIN" --port_file="$TMP/port" >"$TMP/out" 2>"$TMP/err" &
pid=$!
for _ in $(seq 100); do
  [[ -s "$TMP/port" ]] && break
  sleep 0.1
done
[[ -s "$TMP/port" ]] || fail "no port file; stderr: $(cat "$TMP/err")"
port=$(cat "$TMP/port")
grep -qx "ps_server listening on 127.0.0.1:$port" "$TMP/out" || fail "stdout: $(cat "$TMP/out")"
# The raw data plane is on by default, on a port of its own.
grep -q "data plane (Push, Pull as raw frames) on 127.0.0.1:[0-9]" "$TMP/err" ||
  fail "no data plane line; stderr: $(cat "$TMP/err")"
kill -TERM "$pid"
wait "$pid"
rc=$?
[[ $rc -eq 0 ]] || fail "exit code $rc after SIGTERM, want 0"

# --data_plane_port=-1: none.
"$BIN" --port_file="$TMP/port2" --data_plane_port=-1 >"$TMP/out2" 2>"$TMP/err2" &
pid=$!
for _ in $(seq 100); do
  [[ -s "$TMP/port2" ]] && break
  sleep 0.1
done
[[ -s "$TMP/port2" ]] || fail "no port file with --data_plane_port=-1; stderr: $(cat "$TMP/err2")"
grep -q "no data plane (--data_plane_port=-1)" "$TMP/err2" || fail "stderr: $(cat "$TMP/err2")"
kill -TERM "$pid"
wait "$pid"
rc=$?
[[ $rc -eq 0 ]] || fail "exit code $rc after SIGTERM (no data plane), want 0"
echo PASS
