// Adapter test: a real ParameterServerService on 127.0.0.1:0, driven through
// GrpcPsClient, checking that results and status codes survive the wire.
#include "ps/service/ps_service.h"

#include <prometheus/registry.h>

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/tensor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ps/core/variable_store.h"
#include "ps/service/grpc_ps_client.h"
#include "rpc/rpc_util.h"

namespace pscluster {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

class PsServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    registry_ = std::make_shared<prometheus::Registry>();
    service_ = std::make_unique<ParameterServerService>(&store_, registry_);
    auto server = StartServer(ServerOptions(), {service_.get()}, registry_);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    target_ = absl::StrCat("127.0.0.1:", server_->port());
    GrpcPsClient::Options options;
    options.target = target_;
    options.call_timeout = std::chrono::seconds(10);
    client_ = std::make_unique<GrpcPsClient>(options);

    CreateVariablesRequest req;
    VariableSpecProto* spec = req.add_variables();
    spec->set_name("w");
    spec->set_dtype(DT_FLOAT32);
    spec->add_shape(2);
    spec->add_shape(2);
    spec->mutable_initializer()->set_type("ones");
    spec->mutable_optimizer()->set_type("sgd");
    spec->mutable_optimizer()->set_learning_rate(0.5f);
    CreateVariablesResponse resp;
    ASSERT_TRUE(client_->CreateVariables(req, &resp).ok());
    ASSERT_TRUE(client_->CreateVariables(req, &resp).ok());
    EXPECT_EQ(resp.existing(), 1);
  }

  absl::Status PushW(Shape shape, float value) {
    PushRequest req;
    NamedTensor* g = req.add_gradients();
    g->set_name("w");
    EncodeTensor(shape, std::vector<float>(NumElements(shape), value), g->mutable_tensor());
    PushResponse resp;
    return client_->Push(req, &resp);
  }

  absl::StatusOr<std::vector<float>> PullW() {
    PullRequest req;
    req.add_names("w");
    PullResponse resp;
    if (absl::Status s = client_->Pull(req, &resp); !s.ok()) return s;
    auto t = DecodeTensor(resp.tensors(0).tensor());
    if (!t.ok()) return t.status();
    return t->values();
  }

  double RequestCount(const std::string& method, const std::string& code) {
    for (const auto& family : registry_->Collect()) {
      if (family.name != "pscluster_rpc_requests_total") continue;
      for (const auto& metric : family.metric) {
        bool match = true;
        for (const auto& label : metric.label) {
          if (label.name == "method" && label.value != method) match = false;
          if (label.name == "code" && label.value != code) match = false;
        }
        if (match) return metric.counter.value;
      }
    }
    return 0;
  }

  VariableStore store_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<ParameterServerService> service_;
  std::unique_ptr<RunningServer> server_;
  std::string target_;
  std::unique_ptr<GrpcPsClient> client_;
};

TEST_F(PsServiceTest, PushPullRoundtrip) {
  ASSERT_TRUE(PushW({2, 2}, 1.0f).ok());
  auto w = PullW();
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_THAT(*w, ElementsAre(0.5f, 0.5f, 0.5f, 0.5f));

  StatsResponse stats;
  ASSERT_TRUE(client_->Stats(StatsRequest(), &stats).ok());
  EXPECT_EQ(stats.applied_updates(), 1);
  ASSERT_EQ(stats.variables_size(), 1);
  EXPECT_EQ(stats.variables(0).parameter_bytes(), 16);
  EXPECT_EQ(RequestCount("Push", "OK"), 1);
}

TEST_F(PsServiceTest, ErrorsKeepTheirCodeAndTheServerKeepsServing) {
  absl::Status s = PushW({4}, 1.0f);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), AllOf(StartsWith("ps " + target_ + ": "), HasSubstr("'w'"),
                                              HasSubstr("[4]"), HasSubstr("[2, 2]")));

  PullRequest req;
  req.add_names("missing");
  PullResponse resp;
  s = client_->Pull(req, &resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(s.message()), HasSubstr("'missing'"));

  EXPECT_EQ(RequestCount("Push", "INVALID_ARGUMENT"), 1);
  EXPECT_EQ(RequestCount("Pull", "NOT_FOUND"), 1);

  // Nothing was applied, and the server still answers.
  auto w = PullW();
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_THAT(*w, ElementsAre(1.0f, 1.0f, 1.0f, 1.0f));
  EXPECT_TRUE(PushW({2, 2}, 1.0f).ok());
}

TEST(GrpcPsClientTest, UnreachableServerIsUnavailableNamingTheTarget) {
  GrpcPsClient::Options options;
  options.target = "127.0.0.1:1";
  options.call_timeout = std::chrono::seconds(5);
  GrpcPsClient client(options);
  StatsResponse resp;
  absl::Status s = client.Stats(StatsRequest(), &resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(s.message()), StartsWith("ps 127.0.0.1:1: "));
}

}  // namespace
}  // namespace pscluster
