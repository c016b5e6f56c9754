"""cc_grpc_proto_library: protobuf + gRPC C++ code from the system protoc and
grpc_cpp_plugin (Debian protobuf-compiler, protobuf-compiler-grpc).

Protos compile with -I. from the execution root, so `import "protos/x.proto";`
works and generated headers are included as "protos/x.pb.h". Well-known types
resolve from /usr/include.

Two libraries come out of one protoc run:
  - `messages` (when given): the messages only (*.pb.h), linking protobuf and
    not gRPC: what common/ and the cores depend on;
  - `name`: the gRPC services (*.grpc.pb.h) over the messages, linking gRPC:
    for rpc/, the services, the binaries and client/.
Without `messages`, `name` holds both. grpc = False makes no service code.
"""

def cc_grpc_proto_library(name, srcs, deps = [], grpc = True, messages = None, **kwargs):
    pb = []
    grpc_pb = []
    for s in srcs:
        base = s[:-len(".proto")]
        pb += [base + ".pb.h", base + ".pb.cc"]
        if grpc:
            grpc_pb += [base + ".grpc.pb.h", base + ".grpc.pb.cc"]
    cmd = "/usr/bin/protoc -I. --cpp_out=$(GENDIR)"
    if grpc:
        cmd += " --grpc_out=$(GENDIR) --plugin=protoc-gen-grpc=/usr/bin/grpc_cpp_plugin"
    cmd += " " + " ".join(["$(location %s)" % s for s in srcs])
    native.genrule(
        name = name + "_gen",
        srcs = srcs,
        outs = pb + grpc_pb,
        cmd = cmd,
    )
    if messages == None:
        native.cc_library(
            name = name,
            srcs = [o for o in pb + grpc_pb if o.endswith(".cc")],
            hdrs = [o for o in pb + grpc_pb if o.endswith(".h")],
            deps = deps + ["@sys_grpc//:lib" if grpc else "@sys_protobuf//:lib"],
            **kwargs
        )
        return
    native.cc_library(
        name = messages,
        srcs = [o for o in pb if o.endswith(".cc")],
        hdrs = [o for o in pb if o.endswith(".h")],
        deps = deps + ["@sys_protobuf//:lib"],
        **kwargs
    )
    if grpc:
        native.cc_library(
            name = name,
            srcs = [o for o in grpc_pb if o.endswith(".cc")],
            hdrs = [o for o in grpc_pb if o.endswith(".h")],
            deps = [":" + messages, "@sys_grpc//:lib"],
            **kwargs
        )
