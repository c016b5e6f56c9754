#include "client/describe.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace {

using ::testing::HasSubstr;

TEST(DescribeTest, Bytes) {
  EXPECT_EQ(FormatBytes(512), "512 B");
  EXPECT_EQ(FormatBytes(1536), "1.5 KiB");
  EXPECT_EQ(FormatBytes(3 << 20), "3.0 MiB");
}

TEST(DescribeTest, ShowsShardsRowsAndPsShares) {
  DescribeJobResponse d;
  d.set_job_id("ctr-1");
  VariableLayout* v = d.add_variables();
  v->set_name("embedding/user");
  v->set_kind("embedding");
  v->add_shape(672);
  v->add_shape(16);
  v->set_partitioner("2 shards along axis 0");
  for (int i = 0; i < 2; ++i) {
    ShardLayoutProto* s = v->add_shards();
    s->set_name("embedding/user/part_" + std::to_string(i));
    s->set_ps_index(i);
    s->set_row_offset(336 * i);
    s->set_rows(336);
    s->set_parameter_bytes(336 * 16 * 4);
    s->set_slot_bytes(336 * 16 * 4);
  }
  VariableLayout* h = d.add_variables();
  h->set_name("embedding/movie");
  h->set_kind("hash_table");
  h->add_shape(-1);
  h->add_shape(16);
  ShardLayoutProto* hs = h->add_shards();
  hs->set_name("embedding/movie/part_0");
  hs->set_rows(4500);
  hs->set_evictions(7);
  for (int i = 0; i < 2; ++i) {
    PsLoad* p = d.add_ps();
    p->set_ps_index(i);
    p->set_address("127.0.0.1:100" + std::to_string(i));
    p->set_parameter_bytes(1000 * (i + 1));
    p->set_variables(3);
  }
  d.set_per_replica_batch(64);
  d.set_global_batch(128);
  d.set_replicas(2);
  d.set_learning_rate("0.02, cosine decay over 100 steps to 0");
  const std::string text = FormatDescribe(d);
  EXPECT_THAT(text, HasSubstr("batch 128 global = 64 per replica x 2 replicas\n"));
  EXPECT_THAT(text, HasSubstr("learning rate 0.02, cosine decay over 100 steps to 0\n"));
  EXPECT_THAT(text, HasSubstr("embedding/user               embedding  [672, 16]      2 shards"));
  EXPECT_THAT(text, HasSubstr("embedding/user/part_1"));
  EXPECT_THAT(text, HasSubstr("[336, 672)"));
  EXPECT_THAT(text, HasSubstr("[?, 16]"));
  EXPECT_THAT(text, HasSubstr("4500 live"));
  EXPECT_THAT(text, HasSubstr("evicted 7"));
  EXPECT_THAT(text, HasSubstr("127.0.0.1:1001"));
  EXPECT_THAT(text, HasSubstr("66.7%"));
}

}  // namespace
}  // namespace pscluster
