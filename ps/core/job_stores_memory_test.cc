// JobStores with a memory budget (ps_server --max_memory_bytes): the limit
// holds over all jobs together, a refused request allocates nothing, and a
// job's end gives its bytes back.
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ps/core/job_stores.h"
#include "ps/core/memory_budget.h"

namespace pscluster {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

CreateVariablesRequest Variable(const std::string& job, const std::string& name, int64_t elements) {
  CreateVariablesRequest req;
  req.set_job(job);
  VariableSpecProto* spec = req.add_variables();
  spec->set_name(name);
  spec->set_dtype(DT_FLOAT32);
  spec->add_shape(elements);
  spec->mutable_initializer()->set_type("zeros");
  spec->mutable_optimizer()->set_type("sgd");
  spec->mutable_optimizer()->set_learning_rate(0.1f);
  return req;
}

int64_t ResidentBytes() {
  long pages = 0, resident = 0;
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return -1;
  const int n = std::fscanf(f, "%ld %ld", &pages, &resident);
  std::fclose(f);
  return n == 2 ? resident * sysconf(_SC_PAGESIZE) : -1;
}

TEST(JobStoresMemoryTest, AStrangersHugeVariablesAreRefusedBeforeAllocation) {
  // The attack, scaled down for the first call: a variable that fits, then
  // one of 2^28 floats (1 GiB) that does not; nothing of it is allocated.
  VariableStore::Options options;
  options.memory_budget = std::make_shared<MemoryBudget>(int64_t{1} << 20);
  JobStores stores(options);
  CreateVariablesResponse resp;
  ASSERT_TRUE(stores.CreateVariables(Variable("a", "w", int64_t{1} << 18), &resp).ok());
  const int64_t before = ResidentBytes();
  absl::Status s = stores.CreateVariables(Variable("b", "huge", int64_t{1} << 28), &resp);
  ASSERT_TRUE(absl::IsResourceExhausted(s)) << s;
  EXPECT_THAT(s.message(), AllOf(HasSubstr("job 'b'"), HasSubstr("1073741824 bytes requested"),
                                 HasSubstr("1048576 held on this PS over all jobs"),
                                 HasSubstr("limit 1048576"), HasSubstr("--max_memory_bytes")));
  EXPECT_LT(ResidentBytes() - before, 16 << 20);
  StatsRequest sreq;
  sreq.set_job("b");
  StatsResponse stats;
  ASSERT_TRUE(stores.Stats(sreq, &stats).ok());
  EXPECT_EQ(stats.variables_size(), 0);
  EXPECT_EQ(stats.held_bytes(), int64_t{1} << 20);
  EXPECT_EQ(stores.memory_budget()->held(), stats.held_bytes());
}

TEST(JobStoresMemoryTest, TheLimitHoldsOverAllJobsAndEndJobGivesBytesBack) {
  VariableStore::Options options;
  options.memory_budget = std::make_shared<MemoryBudget>(6 << 20);
  JobStores stores(options);
  CreateVariablesResponse resp;
  ASSERT_TRUE(stores.CreateVariables(Variable("a", "w", 1 << 20), &resp).ok());  // 4 MiB
  absl::Status s = stores.CreateVariables(Variable("b", "w", 1 << 20), &resp);
  ASSERT_TRUE(absl::IsResourceExhausted(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("4194304 held"));
  EndJobRequest end;
  end.set_job("a");
  EndJobResponse ended;
  ASSERT_TRUE(stores.EndJob(end, &ended).ok());
  EXPECT_EQ(stores.memory_budget()->held(), 0);
  EXPECT_TRUE(stores.CreateVariables(Variable("b", "w", 1 << 20), &resp).ok());
  EXPECT_EQ(stores.memory_budget()->held(), 4 << 20);
}

TEST(JobStoresMemoryTest, WithoutABudgetThereIsNoLimit) {
  JobStores stores;
  EXPECT_EQ(stores.memory_budget(), nullptr);
  CreateVariablesResponse resp;
  EXPECT_TRUE(stores.CreateVariables(Variable("a", "w", 1 << 20), &resp).ok());
}

}  // namespace
}  // namespace pscluster
