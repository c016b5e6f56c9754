// Standard Prometheus process metrics, read from /proc at scrape time:
// process_cpu_seconds_total, process_resident_memory_bytes and
// process_start_time_seconds. StartServer exposes them on every server's
// metrics endpoint. The parsers are exposed for tests.
#ifndef PSCLUSTER_RPC_PROCESS_METRICS_H_
#define PSCLUSTER_RPC_PROCESS_METRICS_H_

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pscluster {

// The fields of /proc/<pid>/stat that the process metrics need, in clock ticks.
struct ProcStat {
  int64_t utime_ticks = 0;
  int64_t stime_ticks = 0;
  int64_t start_ticks = 0;  // since boot
};

// Parses /proc/<pid>/stat (the command name may hold spaces and parentheses).
// INVALID_ARGUMENT when it is malformed.
absl::StatusOr<ProcStat> ParseProcStat(absl::string_view text);
// Resident pages, the second field of /proc/<pid>/statm. INVALID_ARGUMENT
// when malformed.
absl::StatusOr<int64_t> ParseStatmResidentPages(absl::string_view text);
// Boot time (the "btime" line of /proc/stat), seconds since the Unix epoch.
// INVALID_ARGUMENT when there is none.
absl::StatusOr<int64_t> ParseBootTime(absl::string_view text);

// Collects the process metrics of the calling process. A /proc file that
// cannot be read leaves its metric out of that scrape. Thread-safe.
class ProcessMetrics : public prometheus::Collectable {
 public:
  std::vector<prometheus::MetricFamily> Collect() const override;
};

}  // namespace pscluster

#endif  // PSCLUSTER_RPC_PROCESS_METRICS_H_
