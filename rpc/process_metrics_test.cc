#include "rpc/process_metrics.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <map>

namespace pscluster {
namespace {

TEST(ProcessMetricsTest, ParsesStatWithSpacesAndParensInTheName) {
  // Fields 1..22; utime=14, stime=15, starttime=22.
  const std::string stat =
      "4242 (my (odd) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 9 0 "
      "123456 1000000 500 18446744073709551615\n";
  absl::StatusOr<ProcStat> s = ParseProcStat(stat);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->utime_ticks, 250);
  EXPECT_EQ(s->stime_ticks, 75);
  EXPECT_EQ(s->start_ticks, 123456);
}

TEST(ProcessMetricsTest, RejectsMalformedInput) {
  EXPECT_FALSE(ParseProcStat("4242 no-parens S 1").ok());
  EXPECT_FALSE(ParseProcStat("4242 (x) S 1 2 3").ok());
  EXPECT_FALSE(ParseStatmResidentPages("12345").ok());
  EXPECT_FALSE(ParseStatmResidentPages("12345 abc 3").ok());
  EXPECT_FALSE(ParseBootTime("cpu 1 2 3\n").ok());
}

TEST(ProcessMetricsTest, ParsesStatmAndBootTime) {
  EXPECT_EQ(*ParseStatmResidentPages("5000 1200 300 10 0 900 0\n"), 1200);
  EXPECT_EQ(*ParseBootTime("cpu  1 2 3\nintr 5\nbtime 1700000000\nprocesses 9\n"), 1700000000);
}

TEST(ProcessMetricsTest, CollectsThisProcess) {
  // Burn a little CPU so that the counter is above zero.
  volatile double x = 0;
  for (int i = 0; i < 20000000; ++i) x = x + i * 0.5;
  std::map<std::string, double> values;
  for (const prometheus::MetricFamily& f : ProcessMetrics().Collect()) {
    ASSERT_EQ(f.metric.size(), 1u);
    values[f.name] = f.type == prometheus::MetricType::Counter ? f.metric[0].counter.value
                                                               : f.metric[0].gauge.value;
  }
  ASSERT_EQ(values.size(), 3u);
  EXPECT_GT(values["process_cpu_seconds_total"], 0);
  EXPECT_GT(values["process_resident_memory_bytes"], 1 << 20);
  const double now = static_cast<double>(time(nullptr));
  EXPECT_GT(values["process_start_time_seconds"], now - 3600);
  EXPECT_LE(values["process_start_time_seconds"], now + 1);
}

}  // namespace
}  // namespace pscluster
