// PsliteLauncher: drives bench/pslite/pslite_bench (ps-lite built out of tree
// by bench/pslite/build_pslite.sh) from data_plane_bench, so ps-lite's
// push+pull is measured in the same run as pscluster, interleaved with it.
//
// One launcher is one ps-lite cluster (scheduler, P servers, W workers, all
// child processes on 127.0.0.1) kept up for the whole run; each Run is one
// point. The protocol (one text line per command) is in pslite_bench.cc.
//
// Not thread-safe: one caller at a time.
#ifndef PSCLUSTER_BENCH_PSLITE_LAUNCHER_H_
#define PSCLUSTER_BENCH_PSLITE_LAUNCHER_H_

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace pscluster {
namespace bench {

class PsliteLauncher {
 public:
  // Starts `binary launch --servers=P --workers=W` and waits (up to
  // `timeout`) until its cluster is up. The child is killed if this process
  // dies. UNAVAILABLE if it cannot start or does not answer "ready".
  static absl::StatusOr<std::unique_ptr<PsliteLauncher>> Start(const std::string& binary,
                                                               int servers, int workers,
                                                               std::chrono::seconds timeout);
  // Asks the cluster to stop; kills it if it has not exited after 10 s.
  ~PsliteLauncher();

  struct Result {
    double gbps = 0;                 // 2N x round trips, summed over workers / time.
    int64_t fewest_round_trips = 0;  // Of any worker.
  };
  // One point: every worker does round trips of `bytes` in `mode` ("fused":
  // ZPushPull; "push_pull": ZPush then ZPull) from a common start for
  // `seconds` (at least min_iterations, at most max_iterations each).
  // UNAVAILABLE/INTERNAL if the cluster fails or does not answer in `timeout`.
  absl::StatusOr<Result> Run(const std::string& mode, int64_t bytes, double seconds,
                             int64_t min_iterations, int64_t max_iterations);

 private:
  PsliteLauncher() = default;
  // One line from the child's stdout, without the newline.
  absl::StatusOr<std::string> ReadLine();

  pid_t pid_ = -1;
  int to_child_ = -1;
  int from_child_ = -1;
  std::string buffered_;  // Read past the last line.
  std::chrono::seconds timeout_{300};
};

}  // namespace bench
}  // namespace pscluster

#endif  // PSCLUSTER_BENCH_PSLITE_LAUNCHER_H_
