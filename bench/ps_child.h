// PsServerChild: a real ps_server process for a benchmark, on 127.0.0.1:0
// (its port read from --port_file), logging to a file in its own temporary
// directory, and stopped by pid when destroyed (SIGTERM, then SIGKILL after
// 5 s). memory_bench and scale_bench's ps_connections measure its memory
// from /proc. Benchmark code; not thread-safe.
#ifndef PSCLUSTER_BENCH_PS_CHILD_H_
#define PSCLUSTER_BENCH_PS_CHILD_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace pscluster {
namespace bench {

class PsServerChild {
 public:
  // Runs `bin --address=127.0.0.1:0 --port_file=... --allow_keyless_jobs`
  // plus `extra_args` (no coordinator: the bench's own keyless job), and
  // waits up to 30 s for its port. NOT_FOUND if `bin` cannot run,
  // DEADLINE_EXCEEDED naming the log if no port appears.
  static absl::StatusOr<std::unique_ptr<PsServerChild>> Start(
      const std::string& bin, const std::vector<std::string>& extra_args = {});
  ~PsServerChild();
  PsServerChild(const PsServerChild&) = delete;
  PsServerChild& operator=(const PsServerChild&) = delete;

  std::string target() const;
  pid_t pid() const { return pid_; }
  // VmRSS and VmHWM of the child, bytes; UNAVAILABLE once it is gone.
  absl::StatusOr<std::pair<int64_t, int64_t>> Memory() const;
  // The log's last line containing `text`, or "".
  std::string LastLogLine(const std::string& text) const;

 private:
  explicit PsServerChild(std::string dir) : dir_(std::move(dir)) {}

  std::string dir_;
  pid_t pid_ = -1;
  int port_ = 0;
};

}  // namespace bench
}  // namespace pscluster

#endif  // PSCLUSTER_BENCH_PS_CHILD_H_
