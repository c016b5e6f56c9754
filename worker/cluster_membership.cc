#include "worker/cluster_membership.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "rpc/rpc_util.h"

namespace pscluster {

ClusterMembership::ClusterMembership(Options options)
    : options_(std::move(options)),
      stub_(Coordinator::NewStub(MakeChannel(options_.coordinator))) {}

absl::Status ClusterMembership::Join() {
  RegisterWorkerRequest request;
  request.set_address(options_.address);
  request.set_join_token(options_.join_token);
  const absl::Time give_up = absl::Now() + options_.join_timeout;
  absl::Duration backoff = absl::Milliseconds(200);
  while (true) {
    grpc::ClientContext ctx;
    // Registration pings this worker first (up to 2 s).
    SetDeadline(&ctx, std::chrono::milliseconds(10000));
    RegisterWorkerResponse response;
    absl::Status s = FromGrpcStatus(stub_->RegisterWorker(&ctx, request, &response));
    if (s.ok()) {
      joined_ = true;
      spdlog::info("joined the cluster of coordinator {} as worker {} ({} workers now)",
                   options_.coordinator, response.index(), response.active_workers());
      return s;
    }
    if (absl::IsAlreadyExists(s)) {
      joined_ = true;
      spdlog::info("already a worker of coordinator {}: {}", options_.coordinator,
                   std::string(s.message()));
      return absl::OkStatus();
    }
    // The coordinator itself not answering (yet): asked again. Anything it
    // answers is its verdict.
    const bool unreachable = (absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s)) &&
                             s.message().find("cannot register worker") == std::string::npos;
    if (!unreachable || absl::Now() + backoff > give_up) {
      return absl::Status(s.code(), absl::StrCat("joining the cluster of coordinator ",
                                                 options_.coordinator, " as ", options_.address,
                                                 ": ", s.message()));
    }
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, absl::Seconds(5));
  }
}

absl::Status ClusterMembership::Leave(int* in_flight) {
  *in_flight = 0;
  if (!joined_) return absl::OkStatus();
  LeaveClusterRequest request;
  request.set_address(options_.address);
  request.set_join_token(options_.join_token);
  request.set_wait_s(absl::ToDoubleSeconds(options_.leave_wait));
  grpc::ClientContext ctx;
  SetDeadline(&ctx, std::chrono::milliseconds(
                        absl::ToInt64Milliseconds(options_.leave_wait + absl::Seconds(5))));
  LeaveClusterResponse response;
  absl::Status s = FromGrpcStatus(stub_->LeaveCluster(&ctx, request, &response));
  if (!s.ok()) {
    return absl::Status(s.code(), absl::StrCat("leaving the cluster of coordinator ",
                                               options_.coordinator, ": ", s.message()));
  }
  joined_ = false;
  *in_flight = response.in_flight();
  return absl::OkStatus();
}

}  // namespace pscluster
