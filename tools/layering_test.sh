#!/usr/bin/env bash
# The build's layers (tools/check_layers.py): the repository's includes all
# point down, and each kind of wrong include is caught in a scratch tree.
# usage: layering_test.sh CHECK_LAYERS_PY
set -euo pipefail
CHECK="$1"
TMP="${TEST_TMPDIR:-$(mktemp -d)}"
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
# The repository: the real path of the checker (a runfiles symlink into it).
REPO="$(dirname "$(dirname "$(readlink -f "$CHECK")")")"
[[ -d "$REPO/common" && -d "$REPO/ps/core" ]] || fail "no repository at $REPO"
python3 "$CHECK" "$REPO" || fail "an include or a BUILD dep of the repository crosses a layer, or a package is public (above)"

# A scratch tree: one clean file per layer, then one wrong include at a time.
tree="$TMP/tree"
make_tree() {
  rm -rf "$tree"
  mkdir -p "$tree"/{protos,common,rpc,ps/core,ps/service,worker/core,client}
  echo '#include "protos/ps.pb.h"' > "$tree/common/a.h"
  printf '#include "common/a.h"\n#include "ps/core/b.h"\n#include "protos/ps.pb.h"\n' > "$tree/ps/core/a.h"
  echo '#include <vector>' > "$tree/ps/core/b.h"
  printf '#include <grpcpp/grpcpp.h>\n#include "common/a.h"\n' > "$tree/rpc/a.h"
  printf '#include "rpc/a.h"\n#include "ps/core/a.h"\n#include "protos/ps.grpc.pb.h"\n' > "$tree/ps/service/a.h"
  printf '#include "ps/service/a.h"\n#include "worker/core/a.h"\n' > "$tree/client/a.h"
  echo '#include "common/a.h"' > "$tree/worker/core/a.h"
  # A core's test may run another core in process.
  echo '#include "worker/core/a.h"' > "$tree/ps/core/a_test.cc"
  # BUILD files: a core's library on the proto messages, its test on anything;
  # a service on gRPC.
  cat > "$tree/ps/core/BUILD.bazel" << 'BUILD'
package(default_visibility = ["//ps:__subpackages__"])
cc_library(name = "a", hdrs = ["a.h", "b.h"], deps = ["//common:a", "//protos:pscluster_cc_proto"])
cc_test(name = "a_test", srcs = ["a_test.cc"], deps = [":a", "//worker/core:a", "@sys_grpc//:lib"])
BUILD
  cat > "$tree/ps/service/BUILD.bazel" << 'BUILD'
package(default_visibility = ["//ps:__subpackages__"])
cc_library(name = "a", deps = ["//ps/core:a", "//rpc:a", "//protos:pscluster_cc_grpc"])
BUILD
}
make_tree
python3 "$CHECK" "$tree" > "$TMP/clean.out" || { cat "$TMP/clean.out" >&2; fail "a clean tree was flagged"; }
while IFS='|' read -r file line want; do
  make_tree
  echo "$line" >> "$tree/$file"
  if python3 "$CHECK" "$tree" > "$TMP/out" 2> /dev/null; then
    fail "$file with '$line' was not flagged"
  fi
  grep -q "$want" "$TMP/out" || { cat "$TMP/out" >&2; fail "$file: want '$want'"; }
  echo "ok: $file '$line' -> $(head -n 1 "$TMP/out")"
done << 'CASES'
common/a.h|#include "rpc/a.h"|common may not include the higher layer rpc
common/a.h|#include "ps/core/a.h"|common may not include the higher layer ps/core
ps/core/a.h|#include "ps/service/a.h"|ps/core may not include the higher layer ps/service
ps/core/a.h|#include "worker/core/a.h"|ps/core may not include another core, worker/core
ps/core/a.h|#include <grpcpp/grpcpp.h>|ps/core is below rpc/: no gRPC
ps/core/a.h|#include "protos/ps.grpc.pb.h"|proto messages only, not gRPC stubs
rpc/a.h|#include "ps/service/a.h"|rpc may not include the higher layer ps/service
ps/service/a.h|#include "worker/service/a.h"|ps/service may not include another service
ps/service/a.h|#include "client/a.h"|ps/service may not include the higher layer client
ps/core/BUILD.bazel|cc_library(name = "x", deps = ["//protos:pscluster_cc_grpc"])|ps/core is below rpc/: no gRPC
ps/core/BUILD.bazel|cc_library(name = "x", deps = ["@sys_grpc//:lib"])|ps/core is below rpc/: no gRPC
ps/core/BUILD.bazel|cc_library(name = "x", deps = ["//rpc:a"])|ps/core may not depend on the higher layer rpc
ps/core/BUILD.bazel|cc_binary(name = "x", deps = ["//worker/core:a"])|ps/core may not depend on another core, worker/core
ps/service/BUILD.bazel|package(default_visibility = ["//visibility:public"])|package is public by default
CASES
echo PASS
