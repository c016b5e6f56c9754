// pscluster's public C++ job client: submit YAML jobs to a running
// coordinator and follow them, from a program instead of psctl.
//
// One JobClient is one channel to one coordinator (protos/coordinator.proto's
// Coordinator service), with the bearer token of its job service and, when
// the cluster speaks it, mutual TLS. Every method is one RPC (Watch: one
// stream) with the same errors as the RPC: a gRPC error keeps its code
// (UNAVAILABLE, NOT_FOUND, UNAUTHENTICATED, PERMISSION_DENIED, ...) and its
// message is prefixed with the RPC's name ("GetJob: job ... not found").
//
//   pscluster::JobClientOptions options;
//   options.token = token;
//   absl::StatusOr<std::unique_ptr<pscluster::JobClient>> client =
//       pscluster::JobClient::Connect("127.0.0.1:7070", options);
//   absl::StatusOr<std::string> id = (*client)->SubmitFile("job.yaml");
//   absl::StatusOr<pscluster::JobStatusProto> done = (*client)->Watch(*id);
//
// This is the job half of the API issue 20 asks for; the ClusterCoordinator
// half (scheduling users' own functions) does not exist yet.
//
// Thread-safety: thread-safe. Any number of threads may call any method of
// one JobClient at once (gRPC stubs are). TLS is one setting per process
// (rpc/transport.h): the first Connect that asks for TLS configures it for
// the whole process, and a later Connect asking for other files, or for
// plaintext, fails with FAILED_PRECONDITION.
#ifndef PSCLUSTER_API_PSCLUSTER_JOB_CLIENT_H_
#define PSCLUSTER_API_PSCLUSTER_JOB_CLIENT_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "protos/coordinator.grpc.pb.h"

namespace pscluster {

struct JobClientOptions {
  // Sent as `authorization: Bearer TOKEN` on every call; the coordinator's
  // --auth_tokens_file decides whom it names. Empty: no token (a coordinator
  // without a tokens file is open).
  std::string token;
  // Mutual TLS: the client's certificate and key, and the cluster CA that
  // signed the coordinator's certificate. All empty: plaintext; otherwise all
  // three are needed (PEM files, checked at Connect).
  std::string tls_cert;
  std::string tls_key;
  std::string tls_ca;
  // The name the coordinator's certificate is checked against instead of the
  // dialled host. Empty: the host.
  std::string tls_server_name;
  // How long Connect waits for the channel to connect. Zero: it does not
  // wait, and the first call reports an unreachable coordinator.
  absl::Duration connect_timeout = absl::Seconds(10);
  // The deadline of each unary call (not of Watch's stream).
  absl::Duration rpc_timeout = absl::Seconds(10);
};

struct WatchOptions {
  // How long Watch waits for the job to end. Infinite by default.
  absl::Duration timeout = absl::InfiniteDuration();
  // Called with each status the coordinator streams (progress), on a thread
  // of Watch's own, one call at a time, never after Watch returned. May be
  // empty.
  std::function<void(const JobStatusProto&)> on_update;
  // Polled about every 100 ms on the calling thread; returning true ends the
  // watch with CANCELLED (e.g. the user pressed Ctrl-C). The job itself is
  // not cancelled. May be empty.
  std::function<bool()> interrupted;
  // How long, per outage, to wait for a coordinator that went away during
  // the watch to answer again (a restarted coordinator with --state_dir
  // resumes the job under the same id). Zero: the watch ends at the first
  // break with the stream's error.
  absl::Duration reconnect_timeout = absl::ZeroDuration();
};

class JobClient {
 public:
  // A client of the coordinator at `address` ("host:port"). INVALID_ARGUMENT
  // for an empty address or incomplete TLS files, NOT_FOUND for a TLS file
  // that cannot be read, FAILED_PRECONDITION when the process already speaks
  // another TLS setting, UNAVAILABLE when the channel does not connect within
  // options.connect_timeout.
  static absl::StatusOr<std::unique_ptr<JobClient>> Connect(const std::string& address,
                                                            const JobClientOptions& options = {});

  JobClient(const JobClient&) = delete;
  JobClient& operator=(const JobClient&) = delete;

  const std::string& address() const { return address_; }

  // Submits the job whose YAML is `spec_yaml`; returns its id. The spec is
  // parsed here first, so a bad one fails with INVALID_ARGUMENT and a
  // "FILE:LINE:COL: what is wrong" message without reaching the coordinator
  // (FILE is `spec_path`, "job.yaml" when empty). Data files are checked by
  // the coordinator and the workers, which may see another file system. The
  // coordinator's refusals keep their codes (RESOURCE_EXHAUSTED for a job
  // over its limits, ...).
  absl::StatusOr<std::string> Submit(const std::string& spec_yaml,
                                     const std::string& spec_path = "");
  // As Submit, with the YAML read from the file `spec_path`; NOT_FOUND if it
  // cannot be read.
  absl::StatusOr<std::string> SubmitFile(const std::string& spec_path);

  // The job's current status. NOT_FOUND for an unknown id.
  absl::StatusOr<JobStatusProto> Get(const std::string& job_id);

  // Follows the job (the WatchJob stream) until it ends and returns its final
  // status (SUCCEEDED, FAILED or CANCELLED: check state(); a failed job is
  // not an error here). NOT_FOUND for an unknown id; DEADLINE_EXCEEDED,
  // naming the last state seen, when options.timeout passes first;
  // CANCELLED when options.interrupted returned true; the stream's error
  // when the coordinator went away.
  absl::StatusOr<JobStatusProto> Watch(const std::string& job_id,
                                       const WatchOptions& options = {});

  // The job's event log, oldest first (GetJobEvents). NOT_FOUND for an
  // unknown id.
  absl::StatusOr<GetJobEventsResponse> Events(const std::string& job_id);

  // Asks the coordinator to cancel the job; it ends CANCELLED soon after
  // (Watch it to know when). NOT_FOUND for an unknown id; PERMISSION_DENIED
  // for another user's job; FAILED_PRECONDITION naming its state for a job
  // that already ended.
  absl::Status Cancel(const std::string& job_id);

  // Every job the coordinator knows, queued ones with their queue position.
  absl::StatusOr<ListJobsResponse> List();

 private:
  JobClient(std::string address, absl::Duration rpc_timeout,
            std::unique_ptr<Coordinator::Stub> stub);

  const std::string address_;
  const absl::Duration rpc_timeout_;
  const std::unique_ptr<Coordinator::Stub> stub_;  // thread-safe
};

}  // namespace pscluster

#endif  // PSCLUSTER_API_PSCLUSTER_JOB_CLIENT_H_
