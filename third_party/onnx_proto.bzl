"""onnx_proto_library: the ONNX protobuf schema as Debian's libonnx-dev builds it.

libonnx-dev ships the generated C++ of onnx-ml.proto (/usr/include/onnx/onnx-ml.pb.h,
made by Debian's protoc for Debian's libprotobuf) and libonnx_proto.so, but no
pkg-config file, so pkg_config_library cannot wrap it. This rule checks that the
header and library are there (failing with the package to install otherwise) and
declares a cc_library that links -lonnx_proto and defines ONNX_ML, so that
dependents include "onnx/onnx_pb.h" (it defines ONNX_API, then includes the
onnx-ml.pb.h Debian generated); dependents add @sys_protobuf.
"""

def _onnx_proto_library_impl(rctx):
    header = rctx.path(rctx.attr.include_dir + "/onnx/onnx-ml.pb.h")
    if not header.exists:
        fail("%s not found: install libonnx-dev (run ./setup.sh)" % header)
    found = False
    for d in rctx.attr.lib_dirs:
        if rctx.path(d + "/libonnx_proto.so").exists:
            found = True
    if not found:
        fail("libonnx_proto.so not found in %s: install libonnx-dev (run ./setup.sh)" %
             rctx.attr.lib_dirs)
    rctx.file("WORKSPACE", 'workspace(name = "%s")\n' % rctx.name)
    rctx.file("BUILD.bazel", """\
cc_library(
    name = "lib",
    defines = ["ONNX_ML=1", "ONNX_NAMESPACE=onnx"],
    linkopts = ["-lonnx_proto"],
    visibility = ["//visibility:public"],
)
""")

onnx_proto_library = repository_rule(
    implementation = _onnx_proto_library_impl,
    attrs = {
        "include_dir": attr.string(default = "/usr/include"),
        "lib_dirs": attr.string_list(default = ["/usr/lib/x86_64-linux-gnu", "/usr/lib"]),
    },
    local = True,
)
