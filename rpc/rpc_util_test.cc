// StartServer's health service: per-service-name answers, and SetServing.
#include "rpc/rpc_util.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/impl/codegen/client_unary_call.h>
#include <grpcpp/impl/codegen/rpc_method.h>
#include <gtest/gtest.h>

#include <string>

#include "protos/worker.grpc.pb.h"

namespace pscluster {
namespace {

// grpc.health.v1.Health/Check, with the (tiny) protos encoded by hand:
// HealthCheckRequest{1: service}, HealthCheckResponse{1: status enum}.
// Returns the status (1 SERVING, 2 NOT_SERVING) or -code on an RPC error.
int Check(const std::shared_ptr<grpc::Channel>& channel, const std::string& service) {
  std::string request;
  if (!service.empty()) {
    request.push_back(0x0a);
    request.push_back(static_cast<char>(service.size()));
    request += service;
  }
  grpc::Slice slice(request);
  grpc::ByteBuffer in(&slice, 1), out;
  grpc::ClientContext ctx;
  SetDeadline(&ctx, std::chrono::seconds(5));
  grpc::internal::RpcMethod method("/grpc.health.v1.Health/Check",
                                   grpc::internal::RpcMethod::NORMAL_RPC);
  grpc::Status s = grpc::internal::BlockingUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(
      channel.get(), method, &ctx, in, &out);
  if (!s.ok()) return -static_cast<int>(s.error_code());
  grpc::Slice reply;
  if (!out.DumpToSingleSlice(&reply).ok()) return -100;
  const std::string bytes(reinterpret_cast<const char*>(reply.begin()), reply.size());
  if (bytes.empty()) return 0;  // UNKNOWN (the default value is not encoded)
  return bytes.size() == 2 && bytes[0] == 0x08 ? bytes[1] : -101;
}

TEST(StartServerTest, HealthAnswersPerServiceName) {
  ServerOptions options;
  options.health_services = {Worker::service_full_name()};
  Worker::Service unimplemented;  // gRPC serves health only beside a service
  auto server = StartServer(options, {&unimplemented}, nullptr);
  ASSERT_TRUE(server.ok()) << server.status();
  auto channel = MakeChannel("127.0.0.1:" + std::to_string((*server)->port()));
  EXPECT_EQ(Check(channel, ""), 1);
  EXPECT_EQ(Check(channel, "pscluster.Worker"), 1);
  EXPECT_EQ(Check(channel, "pscluster.Nope"), -static_cast<int>(grpc::StatusCode::NOT_FOUND));
  (*server)->SetServing("pscluster.Worker", false);
  (*server)->SetServing("", false);
  EXPECT_EQ(Check(channel, "pscluster.Worker"), 2);
  EXPECT_EQ(Check(channel, ""), 2);
  (*server)->SetServing("pscluster.Worker", true);
  EXPECT_EQ(Check(channel, "pscluster.Worker"), 1);
}

}  // namespace
}  // namespace pscluster
