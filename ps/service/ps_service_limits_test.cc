// A PS at its limits, through a real ParameterServerService on 127.0.0.1:0
// and RemotePsClient: one without --checkpoint_root, one at its
// --max_memory_bytes, and a PS nobody answers at.
#include <prometheus/registry.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ps/core/job_stores.h"
#include "ps/core/memory_budget.h"
#include "ps/service/ps_service.h"
#include "ps/service/remote_ps_client.h"
#include "rpc/rpc_util.h"

namespace pscluster {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr char kJob[] = "test-job";

TEST(PsServiceNoRootTest, SaveAndRestoreNeedACheckpointRoot) {
  JobStores store;  // a ps_server without --checkpoint_root
  auto registry = std::make_shared<prometheus::Registry>();
  ParameterServerService service(&store, registry);
  auto server = StartServer(ServerOptions(), {&service}, registry);
  ASSERT_TRUE(server.ok()) << server.status();
  RemotePsClient::Options options;
  options.target = absl::StrCat("127.0.0.1:", (*server)->port());
  RemotePsClient client(options);
  SaveRequest save;
  save.set_job(kJob);
  save.set_name("job/ckpt-0/ps-0.data");
  SaveResponse saved;
  absl::Status s = client.Save(save, &saved);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("--checkpoint_root"));
  RestoreRequest restore;
  restore.set_job(kJob);
  restore.mutable_variables()->set_job(kJob);
  restore.add_files()->set_name("job/ckpt-0/ps-0.data");
  restore.set_num_ps(1);
  RestoreResponse restored;
  s = client.Restore(restore, &restored);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("--checkpoint_root"));
}

long ResidentKib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::strtol(line.c_str() + 6, nullptr, 10);
  }
  return -1;
}

// A stranger's CreateVariables past --max_memory_bytes (scaled down: a 4 MiB
// limit instead of 1 GiB) is RESOURCE_EXHAUSTED over the wire, names the
// bytes, and allocates nothing.
TEST(PsServiceMemoryTest, CreateVariablesPastTheLimitIsResourceExhaustedAndAllocatesNothing) {
  VariableStore::Options store_options;
  store_options.memory_budget = std::make_shared<MemoryBudget>(4 << 20);
  JobStores stores(store_options);
  ParameterServerService service(&stores, nullptr);
  auto server = StartServer(ServerOptions(), {&service}, nullptr);
  ASSERT_TRUE(server.ok()) << server.status();
  RemotePsClient::Options options;
  options.target = absl::StrCat("127.0.0.1:", (*server)->port());
  RemotePsClient client(options);
  auto create = [&](const std::string& job, int64_t elements) {
    CreateVariablesRequest req;
    req.set_job(job);
    VariableSpecProto* spec = req.add_variables();
    spec->set_name("v");
    spec->set_dtype(DT_FLOAT32);
    spec->add_shape(elements);
    spec->mutable_initializer()->set_type("zeros");
    spec->mutable_optimizer()->set_type("sgd");
    spec->mutable_optimizer()->set_learning_rate(0.1f);
    CreateVariablesResponse resp;
    return client.CreateVariables(req, &resp);
  };
  ASSERT_TRUE(create("a", 1 << 20).ok());  // exactly the limit
  const long before = ResidentKib();
  absl::Status s = create("b", int64_t{1} << 28);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_THAT(std::string(s.message()),
              AllOf(HasSubstr("1073741824 bytes requested"), HasSubstr("4194304 held"),
                    HasSubstr("limit 4194304")));
  EXPECT_LT(ResidentKib() - before, 16 << 10);
  StatsResponse stats;
  ASSERT_TRUE(client.Stats(StatsRequest(), &stats).ok());
  EXPECT_EQ(stats.held_bytes(), 4 << 20);
  (*server)->Shutdown();
}

TEST(RemotePsClientTest, UnreachableServerIsUnavailableNamingTheTarget) {
  RemotePsClient::Options options;
  options.target = "127.0.0.1:1";
  options.call_timeout = std::chrono::seconds(5);
  RemotePsClient client(options);
  StatsResponse resp;
  absl::Status s = client.Stats(StatsRequest(), &resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(s.message()), StartsWith("ps 127.0.0.1:1: "));
}

}  // namespace
}  // namespace pscluster
