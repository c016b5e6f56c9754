#!/usr/bin/env bash
# The checkpoint disk fails: a Fashion-MNIST MLP (256 units, Adam: a ~2.4 MB
# checkpoint) on 2 PS x 2 workers under `psctl local`, checkpointing every
# 20 steps with checkpoint.max_retries 3.
#  (a) a full disk: the checkpoint directory is a 2 MB tmpfs (a mount
#      namespace of its own around the psctl run), or, where mounting is not
#      allowed, a 1 MB file-size limit (ulimit -f: writes fail with EFBIG).
#      on_failure: continue -> SUCCEEDED with checkpoints disabled after 4
#      failed attempts and no ckpt-* directory left; on_failure: fail -> exit
#      1, FAILED, the error naming the directory and the errno text.
#  (b) the directory becomes unusable at 30 % of the training steps
#      (chattr +i, or where the file system has no immutable flag, the
#      directory is moved away and a regular file put in its place: ENOTDIR).
#      on_failure: continue -> SUCCEEDED, checkpoints disabled, the committed
#      checkpoints untouched, accuracy within 1 % of a clean run.
# Every run: never RUNNING at exit, fewer than 10 checkpoint-failure lines in
# psctl's stderr and the coordinator's log, and a bounded wall time.
#
# usage: chaos_checkpoint_disk_test.sh PSCTL PS_SERVER WORKER_SERVER COORDINATOR
# Every process started is stopped by pid on exit; every loop is bounded.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/testlib.sh"
PSCTL="$(abs "$1")"
BIN_FLAGS=(--ps_server_bin="$(abs "$2")" --worker_server_bin="$(abs "$3")"
           --coordinator_bin="$(abs "$4")")
TMP="${TEST_TMPDIR:-$(mktemp -d)}"
TMP="$(cd "$TMP" && pwd)"
DATA=/usr/share/datasets/fashion-mnist
MAX_RETRIES=3
IMMUTABLE=""  # a directory made immutable, made mutable again on exit

cleanup() {
  [[ -n "$IMMUTABLE" ]] && chattr -i "$IMMUTABLE" 2>/dev/null || true
  testlib_cleanup
}
trap cleanup EXIT

require_fashion_mnist "$DATA"

# disk_job FILE CHECKPOINT_DIR ON_FAILURE [MODEL]
#   MODEL mlp (default): 256 hidden units and Adam, a ~2.4 MB checkpoint;
#   softmax: softmax regression, a convex model whose final accuracy hardly
#   depends on the order of asynchronous updates, for the 1 % comparison.
disk_job() {
  local layers="[{dense: {units: 256, activation: relu}}, {dense: {units: 10}}]" limit=24000
  local epochs=3 learning_rate=0.001
  if [[ "${4:-mlp}" == softmax ]]; then
    # Clean runs of this one end within 0.1 % of each other.
    layers="[{dense: {units: 10}}]"
    limit=0
    epochs=6
    learning_rate=0.0003
  fi
  write_job "$1" name=checkpoint-disk layers="$layers" \
    optimizer="{type: adam, learning_rate: $learning_rate}" train_limit="$limit" epochs="$epochs" \
    checkpoint="{dir: $2, every_steps: 20, keep: 2, on_failure: $3, max_retries: $MAX_RETRIES, retry_backoff_s: 0.2}"
}

# field FILE KEY: a field of psctl's JSON result ("" when absent).
field() {
  python3 -c 'import json,sys; v=json.load(open(sys.argv[1])).get(sys.argv[2], ""); print(str(v).lower() if isinstance(v, bool) else v)' "$1" "$2"
}

# failure_lines NAME: checkpoint-failure lines in the run's stderr and logs.
failure_lines() {
  cat "$TMP/$1.err" "$TMP/run-$1"/*.log 2>/dev/null | grep -ci "checkpoint.failed\|checkpoint failed" || true
}

# check_ended NAME EXIT_CODE WANT_EXIT WANT_STATE: the common assertions.
check_ended() {
  local name="$1" rc="$2" want_rc="$3" want_state="$4" state lines
  [[ -s "$TMP/$name.json" ]] || { tail -20 "$TMP/$name.err" >&2; fail "$name: no JSON result (exit $rc)"; }
  state="$(field "$TMP/$name.json" state)"
  [[ "$state" != RUNNING ]] || fail "$name: psctl exited with the job RUNNING"
  ((rc == want_rc)) || { tail -20 "$TMP/$name.err" >&2; fail "$name: psctl exited $rc, want $want_rc"; }
  [[ "$state" == "$want_state" ]] || fail "$name: state $state, want $want_state"
  lines="$(failure_lines "$name")"
  echo "$name: $state, checkpoints $(field "$TMP/$name.json" checkpoints)," \
       "checkpoint_failures $(field "$TMP/$name.json" checkpoint_failures)," \
       "checkpoints_disabled $(field "$TMP/$name.json" checkpoints_disabled)," \
       "eval_accuracy $(field "$TMP/$name.json" eval_accuracy), $lines failure log lines," \
       "${ELAPSED}s"
  echo "$name: checkpoint_error: $(field "$TMP/$name.json" checkpoint_error)"
  ((lines > 0)) || fail "$name: no checkpoint failure was logged"
  ((lines < 10)) || { grep -hi "checkpoint.failed\|checkpoint failed" "$TMP/$name.err" "$TMP/run-$name"/*.log | head -20 >&2
                      fail "$name: $lines checkpoint failure lines (want < 10)"; }
}

# no_torn LISTING: every ckpt-* directory in LISTING (lines "NAME MANIFEST?")
# is committed.
no_torn() {
  if grep -q " torn$" "$1"; then cat "$1" >&2; fail "torn checkpoint directories left behind"; fi
  return 0
}

# list_ckpts DIR: "ckpt-N committed|torn" per checkpoint directory.
list_ckpts() {
  local d
  for d in "$1"/ckpt-*; do
    [[ -e "$d" ]] || continue
    if [[ -f "$d/MANIFEST" ]]; then echo "$(basename "$d") committed"; else echo "$(basename "$d") torn"; fi
  done
}

# --- (a) a full disk.
PROBE="$TMP/probe"
mkdir -p "$PROBE"
# FULL_DISK=ulimit forces the fallback (to check it where mounting works).
if [[ "${FULL_DISK:-}" != ulimit ]] &&
   unshare -m sh -c "mount -t tmpfs -o size=2m tmpfs '$PROBE' && umount '$PROBE'" 2>/dev/null; then
  DISK=tmpfs
  WANT_ERRNO="No space left on device"
else
  DISK=ulimit
  WANT_ERRNO="File too large"
fi
echo "full disk: $DISK"

# run_full NAME ON_FAILURE: runs the job on a full disk; sets RC and ELAPSED,
# writes $TMP/NAME.{json,err,ls} (.ls: the checkpoint directories at the end).
run_full() {
  local name="$1" ckpt="$TMP/$1-ckpt" start=$SECONDS
  mkdir -p "$ckpt"
  disk_job "$TMP/$name.yaml" "$ckpt" "$2"
  local psctl_cmd=(timeout 300 "$PSCTL" local "$TMP/$name.yaml" --ps 2 --workers 2 --output json
                   "${BIN_FLAGS[@]}" --run_dir "$TMP/run-$name" --keep_run_dir)
  RC=0
  if [[ "$DISK" == tmpfs ]]; then
    # Every process of the run sees the 2 MB tmpfs; it goes with the namespace.
    unshare -m bash -c 'ckpt="$1" listing="$2"; shift 2
                        mount -t tmpfs -o size=2m tmpfs "$ckpt" || exit 97
                        rc=0; "$@" || rc=$?
                        for d in "$ckpt"/ckpt-*; do
                          [[ -e "$d" ]] || continue
                          if [[ -f "$d/MANIFEST" ]]; then echo "$(basename "$d") committed"; else echo "$(basename "$d") torn"; fi
                        done > "$listing"
                        echo "tmpfs at the end: $(df -k "$ckpt" | tail -1)" >&2
                        exit $rc' \
      _ "$ckpt" "$TMP/$name.ls" "${psctl_cmd[@]}" > "$TMP/$name.json" 2> "$TMP/$name.err" || RC=$?
  else
    # A 1 MB limit on any file a process of the run writes: each PS's
    # ~1.2 MB data file fails with EFBIG (the servers ignore SIGXFSZ).
    (ulimit -f 1024; exec "${psctl_cmd[@]}") > "$TMP/$name.json" 2> "$TMP/$name.err" || RC=$?
    list_ckpts "$ckpt" > "$TMP/$name.ls"
  fi
  ELAPSED=$((SECONDS - start))
}

run_full full_continue continue
check_ended full_continue "$RC" 0 SUCCEEDED
[[ "$(field "$TMP/full_continue.json" checkpoints_disabled)" == true ]] || fail "full_continue: checkpoints not disabled"
[[ "$(field "$TMP/full_continue.json" checkpoint_failures)" == $((MAX_RETRIES + 1)) ]] ||
  fail "full_continue: checkpoint_failures $(field "$TMP/full_continue.json" checkpoint_failures), want $((MAX_RETRIES + 1))"
[[ "$(field "$TMP/full_continue.json" checkpoint_error)" == *"$WANT_ERRNO"* ]] || fail "full_continue: checkpoint_error does not say '$WANT_ERRNO'"
no_torn "$TMP/full_continue.ls"
[[ ! -s "$TMP/full_continue.ls" ]] || { cat "$TMP/full_continue.ls"; fail "full_continue: a checkpoint of 2.4 MB was committed"; }

run_full full_fail fail
check_ended full_fail "$RC" 1 FAILED
error="$(field "$TMP/full_fail.json" error)"
echo "full_fail: error: $error"
[[ "$error" == *"$WANT_ERRNO"* ]] || fail "full_fail: the error does not say '$WANT_ERRNO'"
[[ "$error" == *"$TMP/full_fail-ckpt/"* ]] || fail "full_fail: the error does not name the checkpoint directory"
[[ "$(field "$TMP/full_fail.json" checkpoint_failures)" == $((MAX_RETRIES + 1)) ]] || fail "full_fail: checkpoint_failures"
no_torn "$TMP/full_fail.ls"

# --- (b) the directory becomes unusable mid-job; first the clean run.
disk_job "$TMP/clean.yaml" "$TMP/clean-ckpt" continue softmax
start=$SECONDS
timeout 300 "$PSCTL" local "$TMP/clean.yaml" --ps 2 --workers 2 --output json "${BIN_FLAGS[@]}" \
  > "$TMP/clean.json" 2> "$TMP/clean.err" || { tail -20 "$TMP/clean.err" >&2; fail "the clean run failed"; }
ELAPSED=$((SECONDS - start))
clean_accuracy="$(field "$TMP/clean.json" eval_accuracy)"
echo "clean: eval_accuracy $clean_accuracy, checkpoints $(field "$TMP/clean.json" checkpoints), ${ELAPSED}s"
[[ "$(field "$TMP/clean.json" checkpoint_failures)" == 0 ]] || fail "the clean run had checkpoint failures"

CKPT="$TMP/broken-ckpt"
disk_job "$TMP/broken.yaml" "$CKPT" continue softmax
start=$SECONDS
local_in_background "$TMP/broken.json" "$TMP/broken.err" 300 "$TMP/broken.yaml" --ps 2 \
  --workers 2 --output json "${BIN_FLAGS[@]}" --run_dir "$TMP/run-broken" --keep_run_dir
wait_progress "$ADDRESS" 0.3 240 || fail "the job did not reach 30 % of its steps"
read -r steps total _ < <(job_progress "$ADDRESS")
# Between two saves if it can (at most 2 s): a save in progress when the
# directory breaks may leave its directory behind where nothing can remove
# it (moved away, or in an immutable directory).
for _ in $(seq 1 200); do
  list_ckpts "$CKPT" | grep -q " torn$" || break
  sleep 0.01
done
# BROKEN_DIR=file forces the fallback (to check it where chattr works).
if [[ "${BROKEN_DIR:-}" != file ]] && chattr +i "$CKPT" 2>/dev/null; then
  IMMUTABLE="$CKPT"
  BROKEN="chattr +i"
  COMMITTED_DIR="$CKPT"
else
  mv "$CKPT" "$CKPT.moved"
  echo "not a directory" > "$CKPT"
  BROKEN="replaced by a regular file"
  COMMITTED_DIR="$CKPT.moved"
fi
echo "broken: at step $steps of $total the checkpoint directory was $BROKEN"
RC=0
wait "$TPID" || RC=$?
ELAPSED=$((SECONDS - start))
check_ended broken "$RC" 0 SUCCEEDED
[[ "$(field "$TMP/broken.json" checkpoints_disabled)" == true ]] || fail "broken: checkpoints not disabled"
[[ "$(field "$TMP/broken.json" checkpoint_failures)" == $((MAX_RETRIES + 1)) ]] || fail "broken: checkpoint_failures"
(("$(field "$TMP/broken.json" checkpoints)" >= 1)) || fail "broken: no checkpoint before the failure"
list_ckpts "$COMMITTED_DIR" > "$TMP/broken.ls"
cat "$TMP/broken.ls"
# At most the save in progress as the directory broke is torn: the newest.
python3 - "$TMP/broken.ls" <<'PY' || fail "broken: torn checkpoint directories left behind"
import sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
torn = [int(n[5:]) for n, s in rows if s == "torn"]
committed = [int(n[5:]) for n, s in rows if s == "committed"]
sys.exit(0 if len(torn) == 0 or (len(torn) == 1 and torn[0] > max(committed, default=-1)) else 1)
PY
grep -q committed "$TMP/broken.ls" || fail "broken: the committed checkpoints are gone"
if [[ "$COMMITTED_DIR" != "$CKPT" ]]; then
  # Manifests name their files by path: put the directory back to verify.
  rm "$CKPT"
  mv "$COMMITTED_DIR" "$CKPT"
fi
timeout 120 "$PSCTL" checkpoint verify "$CKPT" > /dev/null || fail "broken: the newest committed checkpoint does not restore"
broken_accuracy="$(field "$TMP/broken.json" eval_accuracy)"
python3 -c 'import sys; c, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(0 if abs(c - b) <= 0.01 else 1)' \
  "$clean_accuracy" "$broken_accuracy" ||
  fail "broken: eval_accuracy $broken_accuracy is not within 1 % of the clean run's $clean_accuracy"
[[ -n "$IMMUTABLE" ]] && chattr -i "$IMMUTABLE" && IMMUTABLE=""
echo OK
