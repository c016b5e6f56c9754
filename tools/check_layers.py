#!/usr/bin/env python3
"""Checks that #includes follow pscluster's layers (README, "Architecture").

    protos/  <  common/  <  */core/  <  rpc/  <  */service/  <  the rest

A file may include its own layer or a lower one, never a higher one:
  - protos/ (generated messages) and common/ include only protos/ and common/;
  - a core (ps/core, worker/core, coordinator/core, evaluator/core) also includes its own
    core, never another core (they meet in client/ and the binaries), and no
    gRPC: neither <grpcpp/...> / <grpc/...> nor a *.grpc.pb.h (the same cores
    run in one process for strategy: one_device and mirrored);
  - rpc/ (gRPC plumbing) includes protos/, common/ and rpc/;
  - a service (*/service/) includes any of those and its own service;
  - everything else (*/main.cc, client/, tests/, bench/, fuzz/) anything.
Tests of a layer (*_test.cc, *_test_util.h) may include what their test
needs (a core's test may run another core in process).

The BUILD files say the same in their deps, so the link follows the layers
too: a library or binary of common/ or a core depends only on its own
layer and lower ones, on the proto messages (//protos:pscluster_cc_proto)
and never on gRPC (//protos:pscluster_cc_grpc, @sys_grpc) — tests
(cc_test, testonly) excepted, as for includes. And no package is public by
default: every package() names who may use it (default_visibility without
//visibility:public).

usage: check_layers.py [ROOT]   (default: the repository holding this file)
Prints one line per violation ("FILE:LINE: includes X: why") and exits 1 if
there is any, else prints a summary and exits 0.
"""
import ast
import os
import re
import sys

SOURCE_SUFFIXES = (".cc", ".h", ".cu", ".cuh")
SKIPPED_TOP = {"tests", "bench", "fuzz", "tools", "examples", "deploy", "docs", "third_party",
               "data", "shared"}
PROJECT_TOP = {"protos", "common", "rpc", "ps", "worker", "coordinator", "evaluator", "client"}
INCLUDE = re.compile(r'\s*#\s*include\s+([<"])([^">]+)[">]')


def layer(path):
    """(rank, name) of the layer a repository path belongs to."""
    parts = path.split("/")
    if parts[0] == "protos":
        return 0, "protos"
    if parts[0] == "common":
        return 1, "common"
    if len(parts) > 2 and parts[1] == "core":
        return 2, parts[0] + "/core"
    if parts[0] == "rpc":
        return 3, "rpc"
    if len(parts) > 2 and parts[1] == "service":
        return 4, parts[0] + "/service"
    return 5, parts[0]


def is_test(path):
    name = os.path.basename(path)
    return name.endswith("_test.cc") or name.endswith("_test_util.h")


def violations(root):
    found = []
    checked = 0
    for directory, subdirs, files in os.walk(root):
        rel_dir = os.path.relpath(directory, root)
        top = rel_dir.split("/")[0]
        subdirs[:] = [d for d in subdirs if not d.startswith((".", "bazel-"))]
        if rel_dir != "." and (top in SKIPPED_TOP or top.startswith((".", "bazel-"))):
            subdirs[:] = []
            continue
        for name in sorted(files):
            if not name.endswith(SOURCE_SUFFIXES):
                continue
            path = os.path.normpath(os.path.join(rel_dir, name))
            if "/" not in path or is_test(path):
                continue
            rank, own = layer(path)
            if rank >= 5:
                continue
            checked += 1
            with open(os.path.join(root, path), errors="replace") as f:
                for number, line in enumerate(f, 1):
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    kind, target = m.groups()
                    why = None
                    if kind == "<":
                        if rank < 3 and re.match(r"grpc(pp)?/", target):
                            why = f"{own} is below rpc/: no gRPC"
                    elif target.split("/")[0] in PROJECT_TOP:
                        target_rank, target_layer = layer(target)
                        if rank < 3 and target.endswith(".grpc.pb.h"):
                            why = f"{own} is below rpc/: proto messages only, not gRPC stubs"
                        elif target_rank > rank:
                            why = f"{own} may not include the higher layer {target_layer}"
                        elif target_rank == rank and target_layer != own and rank in (2, 4):
                            why = f"{own} may not include another {target_layer.split('/')[1]}, {target_layer}"
                    if why:
                        found.append(f"{path}:{number}: includes {target}: {why}")
    return found, checked


GRPC_LABELS = ("//protos:pscluster_cc_grpc", "@sys_grpc//")
RULES = ("cc_library", "cc_binary", "cc_test")


def label_layer(label, package):
    """(rank, name) of the layer of a dependency label, None for external ones."""
    if label.startswith("@"):
        return None
    if label.startswith(":"):
        target_package = package
    else:
        target_package = label[2:].split(":")[0]
    return layer(target_package + "/BUILD")


def build_violations(root):
    """Wrong deps and public default visibilities in the BUILD files."""
    found = []
    checked = 0
    for directory, subdirs, files in os.walk(root):
        rel_dir = os.path.relpath(directory, root)
        top = rel_dir.split("/")[0]
        subdirs[:] = [d for d in subdirs if not d.startswith((".", "bazel-"))]
        if rel_dir != "." and (top in ("third_party", "shared")
                               or top.startswith((".", "bazel-"))):
            subdirs[:] = []
            continue
        if "BUILD.bazel" not in files:
            continue
        package = "" if rel_dir == "." else rel_dir
        path = os.path.join(package, "BUILD.bazel") if package else "BUILD.bazel"
        with open(os.path.join(root, path)) as f:
            try:
                tree = ast.parse(f.read(), path)
            except SyntaxError as e:
                found.append(f"{path}:{e.lineno}: cannot read: {e.msg}")
                continue
        checked += 1
        rank, own = layer(path)
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
                continue
            kwargs = {k.arg: k.value for k in node.keywords}
            if node.func.id == "package":
                visibility = kwargs.get("default_visibility")
                labels = [e.value for e in getattr(visibility, "elts", [])
                          if isinstance(e, ast.Constant)]
                if "//visibility:public" in labels:
                    found.append(f"{path}:{node.lineno}: package is public by default: "
                                 "name who may use it")
                continue
            if node.func.id not in RULES or rank > 2:
                continue
            testonly = kwargs.get("testonly")
            if node.func.id == "cc_test" or (isinstance(testonly, ast.Constant) and testonly.value):
                continue
            name = getattr(kwargs.get("name"), "value", "?")
            for dep in getattr(kwargs.get("deps"), "elts", []):
                if not isinstance(dep, ast.Constant):
                    continue
                label = dep.value
                why = None
                if label.startswith(GRPC_LABELS):
                    why = f"{own} is below rpc/: no gRPC (use //protos:pscluster_cc_proto)"
                else:
                    dep_layer = label_layer(label, package)
                    if dep_layer is not None:
                        dep_rank, dep_name = dep_layer
                        if dep_rank > rank:
                            why = f"{own} may not depend on the higher layer {dep_name}"
                        elif dep_rank == rank and dep_name != own and rank == 2:
                            why = f"{own} may not depend on another core, {dep_name}"
                if why:
                    found.append(f"{path}:{dep.lineno}: {name} depends on {label}: {why}")
    return found, checked


def main(argv):
    root = argv[1] if len(argv) > 1 else os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
    found, checked = violations(root)
    build_found, build_checked = build_violations(root)
    for v in found + build_found:
        print(v)
    if found or build_found:
        print(f"check_layers: {len(found)} include(s) and {len(build_found)} BUILD line(s) "
              "cross a layer the wrong way", file=sys.stderr)
        return 1
    print(f"check_layers: {checked} files below the top layer, every include points down; "
          f"{build_checked} BUILD files, every dep points down and no package is public")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
