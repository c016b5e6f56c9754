#!/usr/bin/env bash
# Builds ps-lite (github.com/dmlc/ps-lite) out of tree and, against it,
# bench/pslite/pslite_bench.cc: the ps-lite column of data_plane_bench
# (bench/README.md, "The ps-lite column").
#
#   bench/pslite/build_pslite.sh --src /path/to/ps-lite          # a checkout
#   PSLITE_SRC=/path/to/ps-lite bench/pslite/build_pslite.sh
#   bench/pslite/build_pslite.sh --git_dir /work/.mirror/dmlc+ps-lite/repo   # a bare git dir
#
# It never downloads anything: give it ps-lite's sources (a checkout, or a git
# directory whose HEAD it exports with `git archive`). Everything it writes
# goes to bench/.pslite/ (git-ignored; --out DIR to change):
#   bench/.pslite/src/       the exported sources (only with --git_dir)
#   bench/.pslite/build/     ps-lite's cmake build (libpslite.a)
#   bench/.pslite/pslite_bench
# ps-lite's sources are never committed here.
#
# Needs cmake, a C++ compiler, protobuf (libprotobuf-dev, protobuf-compiler:
# already in setup.sh for the main build) and ZeroMQ: `apt-get install -y
# libzmq3-dev`. libzmq3-dev is bench-only and deliberately not in setup.sh.
# Without it ps-lite's CMakeLists would try to download libzmq; this script
# stops first instead.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
src="${PSLITE_SRC:-}"
git_dir=""
out="${repo_root}/bench/.pslite"
jobs="${JOBS:-2}"

usage() {
  sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
}
while [[ $# -gt 0 ]]; do
  case "$1" in
    --src) src="$2"; shift 2 ;;
    --git_dir) git_dir="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    -h|--help) usage ;;
    *) echo "build_pslite.sh: unknown argument $1" >&2; usage ;;
  esac
done

if [[ -z "${src}" && -z "${git_dir}" ]]; then
  echo "build_pslite.sh: give ps-lite's sources: --src DIR, PSLITE_SRC=DIR or --git_dir GIT_DIR" >&2
  exit 2
fi
if ! pkg-config --exists libzmq 2>/dev/null && [[ ! -f /usr/include/zmq.h ]]; then
  echo "build_pslite.sh: ZeroMQ headers not found; install them with: apt-get install -y libzmq3-dev" >&2
  exit 1
fi
for tool in cmake protoc c++; do
  command -v "${tool}" >/dev/null || { echo "build_pslite.sh: ${tool} not found" >&2; exit 1; }
done

mkdir -p "${out}"
if [[ -n "${git_dir}" ]]; then
  rm -rf "${out}/src"
  mkdir -p "${out}/src"
  git --git-dir="${git_dir}" archive HEAD | tar -x -C "${out}/src"
  git --git-dir="${git_dir}" rev-parse HEAD > "${out}/src/COMMIT"
  src="${out}/src"
fi
[[ -f "${src}/CMakeLists.txt" && -f "${src}/include/ps/ps.h" ]] || {
  echo "build_pslite.sh: ${src} does not look like ps-lite (no CMakeLists.txt / include/ps/ps.h)" >&2
  exit 1
}

# ps-lite as its own cmake project, Release (-O3 -DNDEBUG). C++14: the
# system protobuf 3.21 headers need at least C++11, ps-lite asks for 11.
cmake -S "${src}" -B "${out}/build" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_STANDARD=14 -DCMAKE_POSITION_INDEPENDENT_CODE=ON > "${out}/cmake.log"
cmake --build "${out}/build" --target pslite -j "${jobs}"

# The benchmark program, against the library just built.
c++ -std=c++14 -O2 -DNDEBUG -pthread \
  -I"${src}/include" -I"${out}/build" \
  "${repo_root}/bench/pslite/pslite_bench.cc" \
  "${out}/build/libpslite.a" -lprotobuf -lzmq \
  -o "${out}/pslite_bench"
echo "built ${out}/pslite_bench"
