"""cc_grpc_proto_library: protobuf + gRPC C++ code from the system protoc and
grpc_cpp_plugin (Debian protobuf-compiler, protobuf-compiler-grpc).

Protos compile with -I. from the execution root, so `import "protos/x.proto";`
works and generated headers are included as "protos/x.pb.h". Well-known types
resolve from /usr/include.
"""

def cc_grpc_proto_library(name, srcs, deps = [], grpc = True, **kwargs):
    outs = []
    for s in srcs:
        base = s[:-len(".proto")]
        outs += [base + ".pb.h", base + ".pb.cc"]
        if grpc:
            outs += [base + ".grpc.pb.h", base + ".grpc.pb.cc"]
    cmd = "/usr/bin/protoc -I. --cpp_out=$(GENDIR)"
    if grpc:
        cmd += " --grpc_out=$(GENDIR) --plugin=protoc-gen-grpc=/usr/bin/grpc_cpp_plugin"
    cmd += " " + " ".join(["$(location %s)" % s for s in srcs])
    native.genrule(
        name = name + "_gen",
        srcs = srcs,
        outs = outs,
        cmd = cmd,
    )
    native.cc_library(
        name = name,
        srcs = [o for o in outs if o.endswith(".cc")],
        hdrs = [o for o in outs if o.endswith(".h")],
        deps = deps + ["@sys_grpc//:lib"],
        **kwargs
    )
