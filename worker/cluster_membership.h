// ClusterMembership: an elastic worker's side of the coordinator's roster
// (docs/elastic_workers.md). A worker_server started with
// --coordinator=HOST:PORT registers itself once it serves
// (Coordinator.RegisterWorker, with the join token) and, on SIGTERM, leaves
// (Coordinator.LeaveCluster): the coordinator stops handing it closures and
// answers once its calls in flight have finished, so that the worker exits
// with nothing lost and nothing counted as a failure.
//
// Thread-compatible: the worker's main thread calls Join, then Leave.
#ifndef PSCLUSTER_WORKER_CLUSTER_MEMBERSHIP_H_
#define PSCLUSTER_WORKER_CLUSTER_MEMBERSHIP_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "protos/coordinator.grpc.pb.h"

namespace pscluster {

class ClusterMembership {
 public:
  struct Options {
    std::string coordinator;  // host:port
    std::string address;      // host:port the coordinator reaches this worker at
    std::string join_token;
    // How long Join keeps asking a coordinator that does not answer.
    absl::Duration join_timeout = absl::Seconds(60);
    // How long the coordinator may wait for this worker's calls in flight.
    absl::Duration leave_wait = absl::Seconds(60);
  };

  explicit ClusterMembership(Options options);

  // Registers; a coordinator that does not answer (UNAVAILABLE) is asked
  // again with backoff until join_timeout. Its refusal is returned as it
  // is (PERMISSION_DENIED for a wrong token, INVALID_ARGUMENT or
  // UNAVAILABLE for an address it cannot reach, ...). Already a member: OK.
  absl::Status Join();
  bool joined() const { return joined_; }

  // Leaves (after a successful Join; OK otherwise). Returns the closure
  // calls still in flight when the coordinator's wait ended in
  // `in_flight` (0: none).
  absl::Status Leave(int* in_flight);

 private:
  const Options options_;
  std::unique_ptr<Coordinator::Stub> stub_;
  bool joined_ = false;
};

}  // namespace pscluster

#endif  // PSCLUSTER_WORKER_CLUSTER_MEMBERSHIP_H_
