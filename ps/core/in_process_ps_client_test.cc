#include "ps/core/in_process_ps_client.h"

#include "common/tensor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace {

TEST(InProcessPsClientTest, ForwardsToTheStore) {
  VariableStore store;
  InProcessPsClient client(&store);
  CreateVariablesRequest create;
  VariableSpecProto* spec = create.add_variables();
  spec->set_name("w");
  spec->set_dtype(DT_FLOAT32);
  spec->add_shape(2);
  spec->mutable_initializer()->set_type("ones");
  spec->mutable_optimizer()->set_type("sgd");
  spec->mutable_optimizer()->set_learning_rate(0.5f);
  CreateVariablesResponse create_resp;
  ASSERT_TRUE(client.CreateVariables(create, &create_resp).ok());

  PushRequest push;
  push.add_gradients()->set_name("w");
  EncodeTensor({2}, std::vector<float>{1.0f, -1.0f}, push.mutable_gradients(0)->mutable_tensor());
  PushResponse push_resp;
  ASSERT_TRUE(client.Push(push, &push_resp).ok());

  PullRequest pull;
  pull.add_names("w");
  PullResponse pull_resp;
  ASSERT_TRUE(client.Pull(pull, &pull_resp).ok());
  auto w = DecodeTensor(pull_resp.tensors(0).tensor());
  ASSERT_TRUE(w.ok());
  EXPECT_THAT(w->values(), ::testing::ElementsAre(0.5f, 1.5f));

  StatsResponse stats;
  ASSERT_TRUE(client.Stats(StatsRequest(), &stats).ok());
  EXPECT_EQ(stats.applied_updates(), 1);

  pull.add_names("missing");
  EXPECT_EQ(client.Pull(pull, &pull_resp).code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace pscluster
