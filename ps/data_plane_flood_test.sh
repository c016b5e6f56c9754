#!/usr/bin/env bash
# The data plane against a flood of strangers (issue 22): a ps_server started
# with --max_memory_bytes=256 MiB gets 512 connections, each sending a frame
# header that claims a 255 MiB meta (or a 200 KiB meta of which 100 bytes
# come) and then nothing; while they are held open the PS's resident memory
# (/proc/PID/status VmRSS) must stay under 256 MiB, and the PS must live on.
# Before the fix it allocated and zeroed each claimed buffer: 8.2 GB.
#
# usage: data_plane_flood_test.sh PS_SERVER
# The PS is started and stopped by pid (killed by pid on any exit); every
# loop is bounded. The helpers are those of tests/testlib.sh, which this
# package cannot depend on.
set -euo pipefail

PS_SERVER="$1"
TMP="${TEST_TMPDIR:-$(mktemp -d)}"
LIMIT=$((256 << 20))

show_logs() { tail -n 20 "$TMP/ps.err" >&2 || true; }
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
gone() {
  [[ ! -e "/proc/$1/stat" ]] && return 0
  local state
  state="$(sed -E 's/^.*\) (.).*$/\1/' "/proc/$1/stat" 2>/dev/null || echo X)"
  [[ "$state" == Z || "$state" == X ]]
}

"$PS_SERVER" --address=127.0.0.1:0 --max_memory_bytes="$LIMIT" --data_plane_port=0 \
  > "$TMP/ps.out" 2> "$TMP/ps.err" &
PID_ps=$!
trap 'kill -9 "$PID_ps" 2>/dev/null || true' EXIT
data_port=""
for _ in $(seq 600); do
  # ps.err may not exist yet (the background server's shell opens it).
  data_port="$(sed -n 's/.*data plane (Push, Pull as raw frames) on 127\.0\.0\.1:\([0-9]*\).*/\1/p' \
    "$TMP/ps.err" 2>/dev/null | head -n 1 || true)"
  [[ -n "$data_port" ]] && grep -q "listening on" "$TMP/ps.out" && break
  gone "$PID_ps" && { show_logs; fail "ps_server exited before listening"; }
  sleep 0.1
done
[[ -n "$data_port" ]] || { show_logs; fail "no data plane line in the PS's log after 60 s"; }

python3 - "$data_port" "$PID_ps" "$LIMIT" <<'EOF'
import socket, struct, sys, time

port, pid, limit = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
MiB = 1 << 20

def header(meta_bytes, payload_sizes=()):
    # magic "PSDP" | version 1 | kind 1 (push) | code | meta bytes | count
    # | reserved | payload bytes, then the payload sizes (rpc/frame_socket.h).
    head = struct.pack("<IHHiIIIQ", 0x50445350, 1, 1, 0, meta_bytes, len(payload_sizes), 0,
                       sum(payload_sizes))
    return head + b"".join(struct.pack("<Q", s) for s in payload_sizes)

def rss():
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise SystemExit("FAIL: the PS is gone")

claims = [header(255 * MiB), header(200 << 10, [255 * MiB]) + b"\x0a" * 100]
before = rss()
peak = before
held = []
for i in range(512):
    s = socket.socket()
    s.settimeout(5)
    try:
        s.connect(("127.0.0.1", port))
        s.sendall(claims[i % 2])
    except OSError:
        pass  # refused or closed at once: what a PS full of strangers does
    held.append(s)
    if i % 32 == 0:
        peak = max(peak, rss())
# Held open for 2 s, sampled every 50 ms.
deadline = time.time() + 2
while time.time() < deadline:
    peak = max(peak, rss())
    time.sleep(0.05)
for s in held:
    s.close()
print(f"PS VmRSS before {before >> 20} MiB, peak {peak >> 20} MiB with 512 strangers")
if peak >= limit:
    raise SystemExit(f"FAIL: PS VmRSS reached {peak} bytes, limit {limit}")
EOF

gone "$PID_ps" && { show_logs; fail "the PS died under the flood"; }
kill -TERM "$PID_ps"
for _ in $(seq 100); do
  gone "$PID_ps" && break
  sleep 0.1
done
gone "$PID_ps" || fail "the PS did not stop on SIGTERM"
echo PASS
