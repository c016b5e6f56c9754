#include "client/describe.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace pscluster {

std::string FormatBytes(int64_t bytes) {
  if (bytes < 1024) return absl::StrCat(bytes, " B");
  if (bytes < (1 << 20)) return absl::StrFormat("%.1f KiB", bytes / 1024.0);
  if (bytes < (int64_t{1} << 30)) return absl::StrFormat("%.1f MiB", bytes / 1048576.0);
  return absl::StrFormat("%.2f GiB", bytes / 1073741824.0);
}

std::string FormatDescribe(const DescribeJobResponse& d) {
  std::string out = absl::StrCat("job ", d.job_id(), "\n");
  if (d.replicas() > 0) {
    absl::StrAppendFormat(&out, "batch %d global = %d per replica x %d replicas\n",
                          d.global_batch(), d.per_replica_batch(), d.replicas());
  }
  if (!d.learning_rate().empty()) absl::StrAppend(&out, "learning rate ", d.learning_rate(), "\n");
  absl::StrAppendFormat(&out, "%-28s %-10s %-14s %s\n", "variable", "kind", "shape", "partitioner");
  absl::StrAppendFormat(&out, "  %-34s %3s %-17s %10s %10s %s\n", "shard", "ps", "rows", "params",
                        "slots", "");
  for (const VariableLayout& v : d.variables()) {
    std::vector<std::string> dims;
    for (int64_t x : v.shape()) dims.push_back(x < 0 ? "?" : absl::StrCat(x));
    absl::StrAppendFormat(&out, "%-28s %-10s %-14s %s\n", v.name(), v.kind(),
                          absl::StrCat("[", absl::StrJoin(dims, ", "), "]"), v.partitioner());
    for (const ShardLayoutProto& s : v.shards()) {
      const std::string rows =
          v.kind() == "hash_table"
              ? absl::StrCat(s.rows(), " live")
              : absl::StrCat("[", s.row_offset(), ", ", s.row_offset() + s.rows(), ")");
      absl::StrAppendFormat(&out, "  %-34s %3d %-17s %10s %10s%s\n", s.name(), s.ps_index(), rows,
                            FormatBytes(s.parameter_bytes()), FormatBytes(s.slot_bytes()),
                            s.evictions() > 0 ? absl::StrCat("  evicted ", s.evictions()) : "");
    }
  }
  int64_t total_params = 0, total_slots = 0;
  for (const PsLoad& p : d.ps()) {
    total_params += p.parameter_bytes();
    total_slots += p.slot_bytes();
  }
  out += "\n";
  absl::StrAppendFormat(&out, "%-4s %-22s %9s %10s %10s %7s %9s %9s %9s\n", "ps", "address",
                        "variables", "params", "slots", "share", "steps", "repeats", "keys");
  for (const PsLoad& p : d.ps()) {
    const double share = total_params + total_slots > 0
                             ? 100.0 * (p.parameter_bytes() + p.slot_bytes()) /
                                   (total_params + total_slots)
                             : 0;
    absl::StrAppendFormat(&out, "%-4d %-22s %9d %10s %10s %6.1f%% %9d %9d %9d\n", p.ps_index(),
                          p.address(), p.variables(), FormatBytes(p.parameter_bytes()),
                          FormatBytes(p.slot_bytes()), share, p.applied_steps(),
                          p.duplicate_steps(), p.held_keys());
  }
  return out;
}

}  // namespace pscluster
