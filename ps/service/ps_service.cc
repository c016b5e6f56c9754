#include "ps/service/ps_service.h"

#include <malloc.h>

#include <utility>

#include "rpc/peer_role.h"

namespace pscluster {
namespace {

// Messages kept for reuse, per kind, at most this many bytes in all: a PS
// does not keep copies of a huge variable.
constexpr size_t kMaxPooledBytes = 160 << 20;

// Pushes at least this large are followed by malloc_trim.
constexpr size_t kTrimAfterBytes = 16 << 20;

}  // namespace

ParameterServerService::ParameterServerService(JobStores* jobs,
                                               std::shared_ptr<prometheus::Registry> registry)
    : jobs_(jobs),
      handler_("ParameterServer", std::move(registry)),
      pull_requests_(kMaxPooledBytes),
      pull_responses_(kMaxPooledBytes),
      push_requests_(kMaxPooledBytes),
      push_responses_(kMaxPooledBytes) {}

grpc::Status ParameterServerService::CreateVariables(grpc::ServerContext* context,
                                                     const CreateVariablesRequest* request,
                                                     CreateVariablesResponse* response) {
  if (grpc::Status s = CheckPeerRole(*context, {"coordinator"}, "CreateVariables"); !s.ok()) return s;
  return handler_.Run("CreateVariables",
                      [&] { return jobs_->CreateVariables(*request, response); });
}

grpc::ServerUnaryReactor* ParameterServerService::Pull(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* request,
                                                       grpc::ByteBuffer* response) {
  if (grpc::Status s = CheckPeerRole(*context, {"worker", "coordinator"}, "Pull"); !s.ok()) {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(s);
    return reactor;
  }
  std::shared_ptr<PullRequest> req = pull_requests_.Get();
  std::shared_ptr<PullResponse> resp = pull_responses_.Get();
  grpc::Status status = handler_.Run("Pull", [&]() -> absl::Status {
    absl::Status s = ParseFromByteBuffer(*request, req.get(), "PullRequest");
    if (s.ok()) s = jobs_->Pull(*req, resp.get());
    // The tensors go out from `resp`, which returns to the pool once gRPC
    // has sent them.
    if (s.ok()) SerializeToByteBuffer(*resp, resp, response);
    return s;
  });
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(status);
  return reactor;
}

grpc::ServerUnaryReactor* ParameterServerService::Push(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* request,
                                                       grpc::ByteBuffer* response) {
  if (grpc::Status s = CheckPeerRole(*context, {"worker", "coordinator"}, "Push"); !s.ok()) {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(s);
    return reactor;
  }
  const absl::Time start = absl::Now();
  std::shared_ptr<PushRequest> req = push_requests_.Get();
  std::shared_ptr<PushResponse> resp = push_responses_.Get();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const size_t request_bytes = request->Length();
  absl::Status parsed = ParseFromByteBuffer(*request, req.get(), "PushRequest");
  // gRPC would release the request's buffers only after this call is
  // done; once parsed they are not needed, so a large one is released
  // now and the trim below can give its memory back. The buffer is gRPC's
  // per-call message object, handed to us as const only by convention.
  if (request_bytes >= kTrimAfterBytes) const_cast<grpc::ByteBuffer*>(request)->Clear();
  // Answered here, or later by another call's thread (a synchronous share
  // whose step waits for other replicas: ps/core/sync_steps.h). The pooled
  // response lives in the callback until gRPC has sent it.
  auto done = [this, reactor, resp, response, start](absl::Status s) {
    if (s.ok()) SerializeToByteBuffer(*resp, resp, response);
    reactor->Finish(handler_.Record("Push", s, start));
  };
  if (!parsed.ok()) {
    done(parsed);
  } else {
    jobs_->PushAsync(*req, resp.get(), std::move(done));
  }
  const size_t dropped = push_requests_.dropped();
  req.reset();
  // A request too large for the pool was just freed, and gRPC assembled it
  // from many small buffers that glibc keeps after they are freed: give them
  // back, so that a PS stays near its parameters plus slots in resident
  // memory (bench/memory_bench).
  if (request_bytes >= kTrimAfterBytes && push_requests_.dropped() != dropped) malloc_trim(0);
  return reactor;
}

grpc::Status ParameterServerService::Stats(grpc::ServerContext* context, const StatsRequest* request,
                                           StatsResponse* response) {
  // The process's own stats (no job) are a health check's: any role.
  if (!request->job().empty()) {
    if (grpc::Status s = CheckPeerRole(*context, {"coordinator"}, "Stats"); !s.ok()) return s;
  }
  return handler_.Run("Stats", [&] { return jobs_->Stats(*request, response); });
}

grpc::Status ParameterServerService::Save(grpc::ServerContext* context, const SaveRequest* request,
                                          SaveResponse* response) {
  if (grpc::Status s = CheckPeerRole(*context, {"coordinator"}, "Save"); !s.ok()) return s;
  return handler_.Run("Save", [&] { return jobs_->Save(*request, response); });
}

grpc::Status ParameterServerService::Restore(grpc::ServerContext* context, const RestoreRequest* request,
                                             RestoreResponse* response) {
  if (grpc::Status s = CheckPeerRole(*context, {"coordinator"}, "Restore"); !s.ok()) return s;
  return handler_.Run("Restore", [&] { return jobs_->Restore(*request, response); });
}

grpc::Status ParameterServerService::EndJob(grpc::ServerContext* context, const EndJobRequest* request,
                                            EndJobResponse* response) {
  if (grpc::Status s = CheckPeerRole(*context, {"coordinator"}, "EndJob"); !s.ok()) return s;
  grpc::Status status = handler_.Run("EndJob", [&] { return jobs_->EndJob(*request, response); });
  // A job's variables may be most of this process, and the pooled messages
  // were sized for its tensors: hand both back now.
  if (response->existed()) {
    pull_requests_.Clear();
    pull_responses_.Clear();
    push_requests_.Clear();
    push_responses_.Clear();
    if (DataPlaneServer* data_plane = data_plane_.load(); data_plane != nullptr) {
      data_plane->ReleaseBuffers();
    }
    malloc_trim(0);
  }
  return status;
}

grpc::Status ParameterServerService::PruneKeys(grpc::ServerContext* context,
                                               const PruneKeysRequest* request,
                                               PruneKeysResponse* response) {
  if (grpc::Status s = CheckPeerRole(*context, {"coordinator"}, "PruneKeys"); !s.ok()) return s;
  return handler_.Run("PruneKeys", [&] { return jobs_->PruneKeys(*request, response); });
}

grpc::Status ParameterServerService::DataPlane(grpc::ServerContext* context,
                                               const DataPlaneRequest*,
                                               DataPlaneResponse* response) {
  if (grpc::Status s = CheckPeerRole(*context, {"worker", "coordinator"}, "DataPlane"); !s.ok()) {
    return s;
  }
  DataPlaneServer* data_plane = data_plane_.load();
  response->set_port(data_plane != nullptr ? data_plane->port() : 0);
  return grpc::Status::OK;
}

}  // namespace pscluster
