#!/usr/bin/env bash
# Crash consistency of checkpoints: a Fashion-MNIST job on 2 PS x 2 workers
# under `psctl local` (the supervisor restarts killed children) takes a
# checkpoint every 20 steps while one of the checkpoint writers (a random
# ps_server or the coordinator) is killed with kill -9 eight times, 0.3-1.5 s
# apart, so that some kills land in the middle of a save. Afterwards
# `psctl checkpoint verify DIR` must restore a committed checkpoint and never
# a torn one; with the newest committed checkpoint's first data file
# corrupted, it must restore an older one.
#
# usage: checkpoint_crash_test.sh PSCTL PS_SERVER WORKER_SERVER COORDINATOR
# Every process started is stopped by pid on exit; every loop is bounded.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/testlib.sh"
PSCTL="$(abs "$1")"
BIN_FLAGS=(--ps_server_bin="$(abs "$2")" --worker_server_bin="$(abs "$3")"
           --coordinator_bin="$(abs "$4")")
TMP="${TEST_TMPDIR:-$(mktemp -d)}"
TMP="$(cd "$TMP" && pwd)"
DATA=/usr/share/datasets/fashion-mnist
CKPT="$TMP/ckpt"



require_fashion_mnist "$DATA"

rm -rf "$CKPT"
write_job "$TMP/job.yaml" name=checkpoint-crash seed=5 \
  layers="[{dense: {units: 256, activation: relu}}, {dense: {units: 10}}]" \
  optimizer="{type: adam, learning_rate: 0.001}" eval_limit=2000 epochs=4 \
  checkpoint="{dir: $CKPT, every_steps: 20, keep: 3}" \
  fault_tolerance="{max_attempts: 50, ps_recovery_timeout_s: 60, health_check_interval_s: 0.2}"

local_in_background "$TMP/run.json" "$TMP/run.err" 600 "$TMP/job.yaml" --ps 2 --workers 2 \
  --output json "${BIN_FLAGS[@]}" --run_dir "$TMP/run" --keep_run_dir

# Wait (at most 120 s) for the first committed checkpoint.
for _ in $(seq 1 1200); do
  ls "$CKPT"/ckpt-*/MANIFEST > /dev/null 2>&1 && break
  kill -0 "$PSCTL_PID" 2>/dev/null || { tail -40 "$TMP/run.err" >&2; fail "psctl exited early"; }
  sleep 0.1
done
ls "$CKPT"/ckpt-*/MANIFEST > /dev/null 2>&1 || fail "no checkpoint within 120 s"

# kill_at PID MIN MAX WAIT_FOR_SAVE: kill -9 PID at a random moment MIN..MAX
# seconds from now or, with WAIT_FOR_SAVE=1, as soon after MIN as a save is
# in progress (a ckpt-* directory without MANIFEST). Prints when it struck.
kill_at() {
  python3 - "$CKPT" "$@" <<'PY'
import os, random, signal, sys, time
ckpt, pid, lo, hi, wait_for_save = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), sys.argv[5] == "1"
start = time.monotonic()
deadline = start + random.uniform(lo, hi)
def saving():
    try:
        for e in os.scandir(ckpt):
            if e.name.startswith("ckpt-") and not os.path.exists(os.path.join(e.path, "MANIFEST")):
                return e.name
    except OSError:
        pass
    return None
when = "between saves"
while time.monotonic() < deadline:
    if wait_for_save and time.monotonic() - start >= lo:
        d = saving()
        if d:
            when = "during a save (%s had no MANIFEST)" % d
            break
    time.sleep(0.002)
try:
    os.kill(pid, signal.SIGKILL)
except ProcessLookupError:
    when = "(already gone)"
print(when)
PY
}

# Eight times, kill -9 one checkpoint writer: a server child of psctl (it has
# a --port_file, unlike psctl's `coordinator --helpfull` probe) that is a
# ps_server or the coordinator. Every other kill waits for a save.
kills=0
during_save=0
for i in $(seq 1 8); do
  kill -0 "$PSCTL_PID" 2>/dev/null || { echo "psctl exited after $kills kills"; break; }
  victims="$(pgrep -a -P "$PSCTL_PID" | grep -- '--port_file=' |
             awk '{ n = split($2, p, "/"); if (p[n] == "ps_server" || p[n] == "coordinator") print $1, p[n] }' || true)"
  if [[ -z "$victims" ]]; then
    echo "kill $i: no writer up (restarting?)"
    sleep 0.3
    continue
  fi
  victim="$(echo "$victims" | shuf -n 1)"
  when="$(kill_at "${victim%% *}" 0.3 1.5 $((i % 2)))"
  echo "$(date +%T.%N | cut -c1-12) kill $i: kill -9 ${victim#* } (pid ${victim%% *}) $when"
  [[ "$when" == during* ]] && during_save=$((during_save + 1))
  kills=$((kills + 1))
done
echo "$kills kills, $during_save of them during a save"
((kills >= 1)) || fail "nothing was killed"

# Let the job finish (at most 300 s more), else stop psctl by pid.
for _ in $(seq 1 3000); do
  kill -0 "$PSCTL_PID" 2>/dev/null || break
  sleep 0.1
done
if kill -0 "$PSCTL_PID" 2>/dev/null; then
  echo "the job did not end within 300 s of the kills: stopping psctl ($PSCTL_PID)"
  kill -TERM "$PSCTL_PID" 2>/dev/null || true
  for _ in $(seq 1 200); do kill -0 "$PSCTL_PID" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$PSCTL_PID" 2>/dev/null || true
fi
rc=0
wait "$TPID" || rc=$?
echo "psctl exited $rc"
python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print("job", r["state"], "steps", r["steps"], "checkpoints", r.get("checkpoints"), "restarts", r.get("restarts"))' \
  "$TMP/run.json" 2>/dev/null || { echo "(no JSON result)"; tail -20 "$TMP/run.err"; }
grep -E "restarted" "$TMP/run.err" | head -20 || true
grep -rh "checkpoint failed" "$TMP/run" 2>/dev/null | head -10 || true

# verify NAME [ARGS...]: runs `psctl checkpoint verify` (text, then JSON into
# $TMP/NAME.json); fails unless it exits 0.
verify() {
  local name="$1" rc=0
  shift
  echo "--- psctl checkpoint verify $CKPT $* ($name)"
  timeout 120 "$PSCTL" checkpoint verify "$CKPT" "$@" || rc=$?
  ((rc == 0)) || fail "verify ($name) exited $rc"
  timeout 120 "$PSCTL" checkpoint verify "$CKPT" --output json "$@" > "$TMP/$name.json" ||
    fail "verify --output json ($name) failed"
}

# check NAME: the restored checkpoint is committed (a MANIFEST on disk, not
# reported torn), every torn directory really lacks a valid MANIFEST and was
# not restored; prints the restored id.
check() {
  python3 - "$TMP/$1.json" "$CKPT" <<'PY'
import json, os, sys
r = json.load(open(sys.argv[1]))
ckpt = sys.argv[2]
assert r["restored"], r
by_id = {c["id"]: c for c in r["checkpoints"]}
got = by_id[r["restored_id"]]
assert got["state"] == "committed" and got["verified"] and got["restored"], got
assert os.path.exists(os.path.join(ckpt, "ckpt-%d" % got["id"], "MANIFEST")), got
for c in r["checkpoints"]:
    if c["state"] == "torn":
        assert not c["restored"], c
    if c["id"] != got["id"]:
        assert not c["restored"], c
    if c["state"] == "committed" and c["id"] > got["id"]:
        assert not c["verified"], ("a newer committed checkpoint verifies but was passed over", c)
assert len(r["stores"]) == r["num_ps"] and all(s["variables"] > 0 for s in r["stores"]), r["stores"]
print(r["restored_id"])
PY
}

verify after_crashes
first="$(check after_crashes)" || fail "verify after the crashes"
echo "restored checkpoint $first"
committed="$(python3 -c 'import json,sys; print(" ".join(str(c["id"]) for c in json.load(open(sys.argv[1]))["checkpoints"] if c["state"] == "committed"))' "$TMP/after_crashes.json")"
read -r -a committed <<< "$committed"
((${#committed[@]} >= 2)) || fail "fewer than 2 committed checkpoints left: ${committed[*]}"
newest="${committed[0]}"
((first == newest)) || fail "verify restored $first, not the newest committed checkpoint $newest"

# A torn newer checkpoint (the newest's data files, no MANIFEST) is never picked.
torn=$((newest + 100))
mkdir "$CKPT/ckpt-$torn"
cp "$CKPT/ckpt-$newest"/ps-*.data "$CKPT/ckpt-$torn/"
verify with_torn
got="$(check with_torn)" || fail "verify with a torn checkpoint"
((got == newest)) || fail "with a torn ckpt-$torn, verify restored $got, not $newest"
python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); assert any(c["id"]==int(sys.argv[2]) and c["state"]=="torn" for c in r["checkpoints"]), "torn dir not reported"' \
  "$TMP/with_torn.json" "$torn" || fail "ckpt-$torn not reported torn"

# Corrupt the newest committed checkpoint's first data file: an older one restores.
python3 - "$CKPT/ckpt-$newest/ps-0.data" <<'PY'
import os, sys
path = sys.argv[1]
with open(path, "r+b") as f:
    size = os.path.getsize(path)
    f.seek(size // 2)
    b = f.read(1)
    f.seek(size // 2)
    f.write(bytes([b[0] ^ 0x01]))
print("flipped byte %d of %s" % (size // 2, path))
PY
verify corrupted
got="$(check corrupted)" || fail "verify with a corrupted checkpoint"
((got < newest)) || fail "with ckpt-$newest corrupted, verify restored $got"
python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); c=[c for c in r["checkpoints"] if c["id"]==int(sys.argv[2])][0]; assert not c["verified"] and "ps-0.data" in c["problem"], c' \
  "$TMP/corrupted.json" "$newest" || fail "ckpt-$newest not reported as failing verification"
echo "with ckpt-$newest corrupted, verify restored the older ckpt-$got"
echo OK
