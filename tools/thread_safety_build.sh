#!/usr/bin/env bash
# Checks the project's libraries and binaries with --config=clang
# (-Wthread-safety -Werror=thread-safety; .bazelrc). The compiler is
# tools/clang_syntax_only.sh: clang's front end only, where the analysis
# runs, so nothing is optimized or generated. It has an output base of its
# own (its toolchain differs from fuzz/fuzz_smoke.sh's plain clang).
# run_tests.sh runs it as one counted case.
#
#   tools/thread_safety_build.sh [--output_base DIR] [--junit FILE]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
output_base="${PSCLUSTER_CLANG_OUTPUT_BASE:-$HOME/.cache/bazel/pscluster-clang-$(pwd | md5sum | cut -c1-12)}"
junit=""
while (($# > 0)); do
  case "$1" in
    --output_base) output_base="$2"; shift 2 ;;
    --junit) junit="$2"; shift 2 ;;
    *) echo "thread_safety_build: unknown argument $1" >&2; exit 2 ;;
  esac
done
bazel=(bazel "--output_base=$output_base")
trap '"${bazel[@]}" shutdown >/dev/null 2>&1 || true' EXIT
log="$(mktemp "${TMPDIR:-/tmp}/pscluster-clang.XXXXXX")"
start=$SECONDS
# Libraries and binaries; tests and benchmarks link the same libraries, the
# fuzz targets are fuzz_smoke.sh's, and protos/ is generated code. Compiled
# only (the compilation_outputs output group: object files, nothing linked):
# the analysis is a compiler check, and the gcc build links the same code.
targets="$("${bazel[@]}" query --noshow_progress \
  'kind("cc_(library|binary)", //...) except //fuzz/... except //bench/... except //protos/...' \
  2>/dev/null)"
rc=0
# shellcheck disable=SC2086
"${bazel[@]}" build --config=clang --repo_env=CC="$PWD/tools/clang_syntax_only.sh" \
  --symlink_prefix=/ --keep_going \
  --output_groups=compilation_outputs $targets > "$log" 2>&1 || rc=$?
elapsed=$((SECONDS - start))
message=""
if ((rc != 0)); then
  grep -E "error:|warning: .*thread-safety" "$log" | head -n 40 >&2 || tail -n 40 "$log" >&2
  message="clang --config=clang build failed (exit $rc); first errors above"
  echo "thread_safety_build: FAILED: $message" >&2
else
  echo "thread_safety_build: $(wc -w <<< "$targets") targets compiled with -Wthread-safety -Werror=thread-safety in ${elapsed} s"
fi
if [[ -n "$junit" ]]; then
  {
    echo '<?xml version="1.0" encoding="UTF-8"?>'
    echo "<testsuites><testsuite name=\"thread_safety_build\" tests=\"1\" failures=\"$((rc != 0))\">"
    echo -n "<testcase name=\"clang_thread_safety\" classname=\"tools\" time=\"$elapsed\">"
    ((rc == 0)) || echo -n "<failure message=\"$message\"/>"
    echo "</testcase></testsuite></testsuites>"
  } > "$junit"
fi
rm -f "$log"
exit "$rc"
