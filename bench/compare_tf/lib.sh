# Shared by run.sh and run_ctr.sh (sourced, not run): the TF venv, the build,
# the job file, and REPEATS alternating runs of pscluster and a TF script.
# Expects HERE, ROOT, EPOCHS, REPEATS, PS, WORKERS, VPY set by the caller.

# compare_setup EXAMPLE_YAML: makes the venv if missing, builds the binaries
# (unless SKIP_BUILD), cds to ROOT, and writes $WORK/job.yaml: the example with
# EPOCHS epochs. $WORK is removed on exit.
compare_setup() {
  if [[ ! -x "$VPY" ]]; then
    "$HERE/setup.sh"
  fi
  cd "$ROOT"
  if [[ -z "${SKIP_BUILD:-}" ]]; then
    bazel build //client:psctl //ps:ps_server //worker:worker_server //coordinator:coordinator
  fi
  WORK="$(mktemp -d /tmp/compare_tf-run-XXXXXX)"
  trap 'rm -rf "$WORK"' EXIT
  sed "s/^  epochs: [0-9][0-9]*\$/  epochs: $EPOCHS/" "$1" > "$WORK/job.yaml"
  grep -q "^  epochs: $EPOCHS\$" "$WORK/job.yaml" ||
    { echo "$(basename "$0"): could not set epochs in $1" >&2; exit 1; }
}

now() { date +%s.%N; }

# How busy the CPUs were (all cores, %) over the 2 s before each phase, when
# none of these scripts' processes run: other work on the machine (2 cores)
# skews the figures; it goes into the results JSON and the report warns.
load() {
  local a b
  a=$(head -1 /proc/stat); sleep 2; b=$(head -1 /proc/stat)
  awk -v a="$a" -v b="$b" 'BEGIN { split(a, x); split(b, y); t = 0; for (i = 2; i <= 9; i++) t += y[i] - x[i];
    idle = (y[5] - x[5]) + (y[6] - x[6]); printf "%.1f\n", (t > 0 ? 100 * (t - idle) / t : 0) }' > "$WORK/load.$1"
}

# run_alternating TF_SCRIPT: REPEATS alternating runs of `psctl local` on
# $WORK/job.yaml and `TF_SCRIPT train` (plus $TF_EXTRA_ARGS, word-split);
# $WORK/{pscluster,tf}.R.{json,time} and load.* for the report (medians:
# figures move by +-20 % between runs).
run_alternating() {
  local tf_script="$1" r t0 t1
  for ((r = 1; r <= REPEATS; r++)); do
    echo "== pscluster: psctl local ($PS PS x $WORKERS workers, $EPOCHS epochs), run $r/$REPEATS" >&2
    load "pscluster.$r"
    t0=$(now)
    .bazel/bin/client/psctl local "$WORK/job.yaml" --ps "$PS" --workers "$WORKERS" --output json \
      > "$WORK/pscluster.$r.json"
    t1=$(now)
    echo "$t0 $t1" > "$WORK/pscluster.$r.time"

    echo "== TensorFlow: $tf_script train ($PS PS x $WORKERS workers, $EPOCHS epochs), run $r/$REPEATS" >&2
    load "tf.$r"
    t0=$(now)
    "$VPY" "$HERE/$tf_script" train --ps "$PS" --workers "$WORKERS" --epochs "$EPOCHS" \
      --json "$WORK/tf.$r.json" ${TF_EXTRA_ARGS:-} > /dev/null
    t1=$(now)
    echo "$t0 $t1" > "$WORK/tf.$r.time"
  done
}
