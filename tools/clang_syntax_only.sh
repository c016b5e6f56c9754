#!/usr/bin/env bash
# The compiler of tools/thread_safety_build.sh: clang, where a compile (-c)
# runs only the front end (-fsyntax-only), since -Wthread-safety's analysis
# is done there and needs no code generation, and leaves an empty object
# file where Bazel expects one (the dependency file, -MD -MF, is written as
# usual). Anything else (the toolchain's configuration probes, links) is
# plain clang. Never use its objects: they are empty. Bazel keys its actions
# by this file's path, not its content: after editing it, remove the output
# base of tools/thread_safety_build.sh.
# By the full path Bazel's toolchain configuration found it at (its PATH):
# Bazel passes -no-canonical-prefixes, with which clang finds its headers
# relative to the path it was started by, and the actions' PATH starts with
# /bin, where /bin/../lib/gcc is not /usr/lib/gcc.
clang=/usr/bin/clang
[[ -x "$clang" ]] || clang="$(command -v clang)" ||
  { echo "clang_syntax_only: no clang" >&2; exit 127; }
compile=0
out=""
args=("$@")
for ((i = 0; i < ${#args[@]}; ++i)); do
  case "${args[i]}" in
    -c) compile=1 ;;
    -o) out="${args[i + 1]:-}" ;;
  esac
done
if ((compile)) && [[ "$out" == *.o ]]; then
  "$clang" "$@" -fsyntax-only || exit
  : > "$out"
  exit 0
fi
exec "$clang" "$@"
