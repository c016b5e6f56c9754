#!/usr/bin/env bash
# Builds the fuzz targets with --config=fuzz (clang, libFuzzer, ASan, UBSan)
# and runs each for a bounded time on a copy of its seed corpus (the repository
# is never written). Prints the executions per target (libFuzzer's "Done N
# runs in S second(s)") and fails if any target crashes, leaks, trips a
# sanitizer or a FUZZ_CHECK, or does not build.
#
#   fuzz/fuzz_smoke.sh [--seconds N] [--output_base DIR] [--junit FILE] [TARGET...]
#
#   --seconds N        libFuzzer's -max_total_time per target (default 20)
#   --output_base DIR  Bazel output base for the clang build (default
#                      $PSCLUSTER_FUZZ_OUTPUT_BASE, else one under
#                      ~/.cache/bazel next to the normal one): a separate
#                      output base, since switching CC re-configures the C++
#                      toolchain, and so the normal gcc build is never touched
#   --junit FILE       also write one JUnit <testcase> per target to FILE
#                      (run_tests.sh adds them to its closing line)
#   TARGET             fuzz targets to run (default: every //fuzz:*_fuzzer)
#
# A crashing input is kept under $TMPDIR/pscluster-fuzz.*/artifacts/ and
# the directory is named in the output; reproduce it with the gcc build:
#   bazel run //fuzz:<target> -- /path/to/crash-input
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

seconds=20
output_base="${PSCLUSTER_FUZZ_OUTPUT_BASE:-$HOME/.cache/bazel/pscluster-fuzz-$(pwd | md5sum | cut -c1-12)}"
junit=""
targets=()
while (($# > 0)); do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --output_base) output_base="$2"; shift 2 ;;
    --junit) junit="$2"; shift 2 ;;
    -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
    *) targets+=("$1"); shift ;;
  esac
done
if ((${#targets[@]} == 0)); then
  targets=(job_spec_fuzzer cluster_config_fuzzer ps_requests_fuzzer idx_reader_fuzzer
           csv_reader_fuzzer data_plane_fuzzer)
fi

bazel=(bazel "--output_base=$output_base")
# --symlink_prefix=/: no convenience symlinks, so .bazel/ keeps pointing at
# the normal build.
flags=(--config=fuzz --symlink_prefix=/)
work="$(mktemp -d "${TMPDIR:-/tmp}/pscluster-fuzz.XXXXXX")"
keep_work=0
cleanup() {
  "${bazel[@]}" shutdown >/dev/null 2>&1 || true
  if ((keep_work == 0)); then rm -rf "$work"; fi
}
trap cleanup EXIT

xml_escape() { sed -e 's/&/\&amp;/g' -e 's/</\&lt;/g' -e 's/>/\&gt;/g' -e 's/"/\&quot;/g'; }
cases=()  # one <testcase> element per target
record() {  # record NAME SECONDS [FAILURE_MESSAGE]
  local body=""
  if [[ -n "${3:-}" ]]; then
    body="<failure message=\"$(printf '%s' "$3" | xml_escape)\"/>"
  fi
  cases+=("<testcase classname=\"fuzz_smoke\" name=\"$1\" time=\"$2\">$body</testcase>")
}
write_junit() {
  [[ -n "$junit" ]] || return 0
  local failures=0 c
  for c in "${cases[@]}"; do [[ "$c" == *"<failure"* ]] && failures=$((failures + 1)); done
  {
    echo '<?xml version="1.0" encoding="UTF-8"?>'
    echo "<testsuites><testsuite name=\"fuzz_smoke\" tests=\"${#cases[@]}\" failures=\"$failures\">"
    printf '%s\n' "${cases[@]}"
    echo '</testsuite></testsuites>'
  } > "$junit"
}

start=$SECONDS
labels=()
for t in "${targets[@]}"; do labels+=("//fuzz:$t"); done
echo "fuzz_smoke: building ${#targets[@]} fuzz targets with --config=fuzz (output base $output_base)"
if ! "${bazel[@]}" build "${flags[@]}" "${labels[@]}"; then
  for t in "${targets[@]}"; do record "$t" 0 "bazel build --config=fuzz failed"; done
  write_junit
  echo "fuzz_smoke: FAILED: bazel build --config=fuzz"
  exit 1
fi
bin="$("${bazel[@]}" info "${flags[@]}" bazel-bin)"
echo "fuzz_smoke: built in $((SECONDS - start)) s; fuzzing each target for ${seconds} s"

# The targets fuzz side by side, one per core (each is one process), so the
# step takes about `seconds` per core's share of the targets.
jobs="$(nproc 2>/dev/null || echo 1)"
mkdir -p "$work/artifacts"
fuzz_one() {  # fuzz_one TARGET: runs it; its exit status goes to $work/TARGET.rc
  local t="$1" corpus="$work/corpus/$1" rc=0
  mkdir -p "$corpus"
  cp -r "fuzz/corpus/${t%_fuzzer}/." "$corpus/"
  # -rss_limit_mb / -malloc_limit_mb: a request or file must never make a
  # process allocate gigabytes. -timeout: no input may take 10 s.
  ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=0 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "$bin/fuzz/$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
      -malloc_limit_mb=1024 -print_final_stats=1 -artifact_prefix="$work/artifacts/$t-" \
      "$corpus" > "$work/$t.log" 2>&1 || rc=$?
  echo "$rc" > "$work/$t.rc"
}
t0=$SECONDS
running=0
for t in "${targets[@]}"; do
  if ((running >= jobs)); then
    wait -n || true
    running=$((running - 1))
  fi
  fuzz_one "$t" &
  running=$((running + 1))
done
wait || true
fuzz_seconds=$((SECONDS - t0))

failed=0
for t in "${targets[@]}"; do
  corpus="$work/corpus/$t"
  log="$work/$t.log"
  rc="$(cat "$work/$t.rc" 2>/dev/null || echo "?")"
  runs="$(grep -o 'Done [0-9]* runs in [0-9]* second(s)' "$log" | tail -1 || true)"
  problem=""
  if [[ "$rc" != 0 ]]; then
    problem="exit status $rc"
  fi
  if grep -qE 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error:|FUZZ_CHECK|SUMMARY: ' "$log"; then
    problem="${problem:+$problem, }sanitizer or check report"
  fi
  if [[ -z "$runs" ]]; then
    problem="${problem:+$problem, }no \"Done N runs\" line"
  fi
  if [[ -n "$problem" ]]; then
    failed=$((failed + 1))
    keep_work=1
    echo "fuzz_smoke: FAILED $t: $problem; log $log, inputs in $work/artifacts/"
    grep -E -m 20 -A 12 'ERROR:|runtime error:|FUZZ_CHECK|deadly signal' "$log" | head -60 || tail -30 "$log"
    record "$t" "$seconds" "$problem (log: $log)"
  else
    cov="$(grep -o 'cov: [0-9]*' "$log" | tail -1 || true)"
    echo "fuzz_smoke: $t: $runs, corpus $(ls "$corpus" | wc -l) inputs, $cov"
    record "$t" "$seconds"
  fi
done
echo "fuzz_smoke: fuzzed ${#targets[@]} targets, $jobs at a time, in $fuzz_seconds s"
write_junit
echo "fuzz_smoke: $((${#targets[@]} - failed)) of ${#targets[@]} targets clean, $((SECONDS - start)) s in all"
((failed == 0))
