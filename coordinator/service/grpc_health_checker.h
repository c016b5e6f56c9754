// GrpcHealthChecker: HealthChecker over gRPC. A PS is healthy when its Stats
// RPC answers, a worker when its Ping does, each within `timeout` and without
// waiting for a connection (a dead process fails at once). Thread-safe.
#ifndef PSCLUSTER_COORDINATOR_SERVICE_GRPC_HEALTH_CHECKER_H_
#define PSCLUSTER_COORDINATOR_SERVICE_GRPC_HEALTH_CHECKER_H_

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/core/health_checker.h"
#include "protos/ps.grpc.pb.h"
#include "protos/worker.grpc.pb.h"

namespace pscluster {

class GrpcHealthChecker final : public HealthChecker {
 public:
  GrpcHealthChecker(const std::vector<std::string>& ps_addresses,
                    const std::vector<std::string>& worker_addresses,
                    std::chrono::milliseconds timeout = std::chrono::milliseconds(1000));

  absl::StatusOr<uint64_t> CheckPs(int index) override;
  absl::Status CheckWorker(int index) override;
  // Elastic workers: a worker that joined, checked as index size-1 (the
  // returned index; the roster's).
  int AddWorker(const std::string& address) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const std::chrono::milliseconds timeout_;
  std::vector<std::unique_ptr<ParameterServer::Stub>> ps_;
  absl::Mutex mu_;
  std::vector<std::unique_ptr<Worker::Stub>> workers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pscluster

#endif  // PSCLUSTER_COORDINATOR_SERVICE_GRPC_HEALTH_CHECKER_H_
