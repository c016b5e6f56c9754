#!/usr/bin/env bash
# Runs every test in the repository and ends with one line:
#   N passed, N failed, N skipped
# (test cases, summed over all test targets by tools/bazel_test_summary.py).
# Exits non-zero if any test failed or bazel could not build or run them.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

./setup.sh

work="$(mktemp -d /tmp/pscluster-tests.XXXXXX)"
trap 'rm -rf "$work"' EXIT

# The test targets `bazel test //...` runs (manual ones are skipped by it too).
# The Python package's pytest suite is one of them, //python:pscluster_test
# (python/run_pytest.sh): pytest writes its junit XML where Bazel keeps the
# target's test.xml, so each pytest case counts in the closing line.
query_rc=0
bazel query --keep_going 'tests(//...) except attr(tags, "manual", //...)' \
  > "$work/targets" || query_rc=$?

test_rc=0
bazel test --keep_going --build_event_json_file="$work/bep.json" //... || test_rc=$?

testlogs="$(bazel info bazel-testlogs)"
bazel shutdown || true

# Fuzzing smoke: the fuzz/ targets built with clang, libFuzzer, ASan and UBSan
# (--config=fuzz, in its own output base) and each fuzzed for a bounded time
# from its seed corpus; one counted case per target (fuzz/fuzz_smoke.sh).
# PSCLUSTER_FUZZ_SECONDS sets the time per target (default 10; fuzz_smoke.sh
# alone defaults to 20).
fuzz_rc=0
fuzz/fuzz_smoke.sh --seconds "${PSCLUSTER_FUZZ_SECONDS:-10}" --junit "$work/fuzz.xml" ||
  fuzz_rc=$?

# The thread-safety annotations checked: the libraries and binaries built
# with clang -Wthread-safety -Werror=thread-safety (--config=clang, in the
# fuzz step's output base); one counted case.
clang_rc=0
tools/thread_safety_build.sh --junit "$work/clang.xml" || clang_rc=$?

summary_rc=0
python3 tools/bazel_test_summary.py \
  --testlogs "$testlogs" \
  --targets "$work/targets" \
  --bep "$work/bep.json" \
  --extra_xml "$work/fuzz.xml" \
  --extra_xml "$work/clang.xml" \
  --bazel_exit_code "$test_rc" > "$work/summary" || summary_rc=$?

if ((query_rc != 0)); then
  echo "run_tests: bazel query failed ($query_rc)"
fi
# The summary's last line ("N passed, N failed, N skipped") closes the output.
cat "$work/summary"
if ((fuzz_rc != 0)); then
  echo "run_tests: fuzz smoke failed ($fuzz_rc)"
fi
if ((clang_rc != 0)); then
  echo "run_tests: the clang -Wthread-safety build failed ($clang_rc)"
fi
if ((test_rc != 0 || summary_rc != 0 || query_rc != 0 || fuzz_rc != 0 || clang_rc != 0)); then
  exit 1
fi
