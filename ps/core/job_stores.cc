#include "ps/core/job_stores.h"

#include <algorithm>
#include <filesystem>
#include <system_error>
#include <limits>
#include <utility>
#include <vector>

#include "absl/random/random.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/confined_path.h"
#include "common/control_auth.h"
#include "common/status_macros.h"
#include "common/update_lease.h"

namespace pscluster {
namespace {

absl::Status CheckJobId(const std::string& job, absl::string_view what) {
  if (job.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": the job id is empty (every request names its job)"));
  }
  return absl::OkStatus();
}

// Bytes of the regular files under `dir` (0 if it does not exist).
int64_t BytesUnder(const std::string& dir) {
  int64_t total = 0;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(
           dir, std::filesystem::directory_options::skip_permission_denied, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    std::error_code size_ec;
    if (it->is_regular_file(size_ec)) {
      const auto size = it->file_size(size_ec);
      if (!size_ec) total += static_cast<int64_t>(size);
    }
  }
  return total;
}

// NOT_FOUND for a job this PS holds nothing of.
absl::Status NotHeld(const std::string& job) {
  return absl::NotFoundError(absl::StrCat("job '", job,
                                          "' holds nothing on this PS (it never created variables "
                                          "here, has ended, or this PS restarted)"));
}

int64_t HeldBytes(const StatsResponse& stats) {
  int64_t bytes = 0;
  for (const VariableStats& v : stats.variables()) bytes += v.parameter_bytes() + v.slot_bytes();
  return bytes;
}

}  // namespace

JobStores::JobStores(VariableStore::Options store_options, absl::Duration sync_wait_timeout)
    : store_options_(std::move(store_options)),
      sync_wait_timeout_(sync_wait_timeout),
      incarnation_(
          absl::Uniform<uint64_t>(absl::BitGen(), 1, std::numeric_limits<uint64_t>::max())) {
  expire_thread_ = std::thread([this] { ExpireLoop(); });
}

JobStores::~JobStores() {
  {
    absl::MutexLock lock(&expire_mu_);
    stop_ = true;
  }
  expire_thread_.join();
  absl::flat_hash_map<std::string, Sync> syncs;
  {
    absl::MutexLock lock(&mu_);
    syncs.swap(syncs_);
  }
  for (auto& [job, sync] : syncs) sync.steps->Reset("the PS is shutting down");
}

void JobStores::ExpireLoop() {
  const absl::Duration tick = std::min(absl::Milliseconds(100), sync_wait_timeout_ / 4);
  while (true) {
    {
      absl::MutexLock lock(&expire_mu_);
      auto stopped = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(expire_mu_) { return stop_; };
      if (expire_mu_.AwaitWithTimeout(absl::Condition(&stopped), tick)) return;
    }
    std::vector<std::shared_ptr<SyncSteps>> steps;
    {
      absl::ReaderMutexLock lock(&mu_);
      for (const auto& [job, sync] : syncs_) steps.push_back(sync.steps);
    }
    const absl::Time now = absl::Now();
    for (const auto& s : steps) s->Expire(now);
  }
}

std::shared_ptr<SyncSteps> JobStores::SyncFor(const std::string& job,
                                              const std::shared_ptr<VariableStore>& store) {
  absl::MutexLock lock(&mu_);
  Sync& sync = syncs_[job];
  if (sync.store != store) {
    // First use, or the job ended and a new one of the same id began.
    if (sync.steps != nullptr) sync.steps->Reset("the job's namespace was replaced");
    sync.store = store;
    sync.steps = std::make_shared<SyncSteps>(store.get(), sync_wait_timeout_);
  }
  return sync.steps;
}

void JobStores::ResetSync(const std::string& job, const std::string& why) {
  Sync sync;
  {
    absl::MutexLock lock(&mu_);
    auto it = syncs_.find(job);
    if (it == syncs_.end()) return;
    sync = it->second;
  }
  sync.steps->Reset(why);
}

absl::StatusOr<std::shared_ptr<VariableStore>> JobStores::Find(const std::string& job) {
  absl::ReaderMutexLock lock(&mu_);
  auto it = stores_.find(job);
  if (it == stores_.end()) return NotHeld(job);
  return it->second;
}

std::shared_ptr<VariableStore> JobStores::FindOrCreate(const std::string& job) {
  {
    absl::ReaderMutexLock lock(&mu_);
    auto it = stores_.find(job);
    if (it != stores_.end()) return it->second;
  }
  absl::MutexLock lock(&mu_);
  std::shared_ptr<VariableStore>& store = stores_[job];
  if (store == nullptr) store = std::make_shared<VariableStore>(store_options_);
  return store;
}

absl::StatusOr<std::shared_ptr<VariableStore>> JobStores::FindOrCreateWithKey(
    const std::string& job, const std::string& key, const std::string& checkpoint_dir) {
  if (key.empty() && keyless_refused_) {
    absl::ReaderMutexLock lock(&mu_);
    auto it = keys_.find(job);
    if (it == keys_.end()) {
      return absl::PermissionDeniedError(absl::StrCat(
          "job '", job, "' has no job key: this PS takes only jobs of a coordinator (with keys)"));
    }
  }
  std::shared_ptr<VariableStore> store = FindOrCreate(job);
  absl::MutexLock lock(&mu_);
  auto [it, inserted] = keys_.emplace(job, key);
  if (!inserted && it->second != key) {
    return absl::PermissionDeniedError(absl::StrCat(
        "job '", job, "' exists on this PS under another job key (another coordinator's job "
        "of the same id?); end it first"));
  }
  if (!key.empty()) keyless_refused_ = true;
  checkpoint_dirs_.emplace(job, checkpoint_dir);
  return store;
}

std::string JobStores::ControlKey(const std::string& job, const std::string& new_key,
                                  bool* held) {
  absl::ReaderMutexLock lock(&mu_);
  *held = stores_.contains(job);
  if (!*held) return new_key;
  auto it = keys_.find(job);
  return it == keys_.end() ? std::string() : it->second;
}

template <typename R>
absl::Status JobStores::CheckControl(const std::string& method, const R& request,
                                     const std::string& key) {
  if (key.empty()) {
    // A keyless namespace (tools and benchmarks): nothing to check against.
    if (!keyless_refused_) return absl::OkStatus();
    return absl::PermissionDeniedError(
        absl::StrCat(method, " of job '", request.job(),
                     "': the job has no key, and this PS takes only jobs of a coordinator"));
  }
  if (!CheckRequest(key, method, request)) {
    return absl::PermissionDeniedError(
        absl::StrCat(method, " of job '", request.job(),
                     "' is not signed by the job's coordinator (no valid ControlAuth under its "
                     "key): refused, nothing changed"));
  }
  return absl::OkStatus();
}

absl::Status JobStores::CheckPushAuth(const PushRequest& request) {
  RETURN_IF_ERROR(CheckJobId(request.job(), "push"));
  bool held = false;
  const std::string key = ControlKey(request.job(), "", &held);
  if (!held) return NotHeld(request.job());
  if (key.empty()) return absl::OkStatus();  // a job without leases (tools)
  if (!request.has_update()) {
    return absl::PermissionDeniedError(absl::StrCat(
        "a push to job '", request.job(), "' needs an update key with its closure's lease"));
  }
  const UpdateKey& u = request.update();
  if (!CheckLease(key, request.job(), u.closure_id(), u.lease_steps(), u.lease())) {
    return absl::PermissionDeniedError(absl::StrCat("push to job '", request.job(),
                                                    "': no valid lease for closure ",
                                                    u.closure_id(), " (", u.lease_steps(),
                                                    " steps)"));
  }
  if (u.step() < 0 || u.step() >= u.lease_steps()) {
    return absl::PermissionDeniedError(absl::StrCat(
        "push to job '", request.job(), "': step ", u.step(), " of closure ", u.closure_id(),
        " is outside its lease of ", u.lease_steps(), " steps"));
  }
  return absl::OkStatus();
}

absl::Status JobStores::CheckPullAuth(const PullRequest& request) {
  RETURN_IF_ERROR(CheckJobId(request.job(), "pull"));
  bool held = false;
  const std::string key = ControlKey(request.job(), "", &held);
  if (!held) return NotHeld(request.job());
  if (key.empty()) return absl::OkStatus();
  if (request.has_lease()) {
    const UpdateKey& u = request.lease();
    if (CheckLease(key, request.job(), u.closure_id(), u.lease_steps(), u.lease())) {
      return absl::OkStatus();
    }
    return absl::PermissionDeniedError(absl::StrCat("pull of job '", request.job(),
                                                    "': no valid lease for closure ",
                                                    u.closure_id()));
  }
  return CheckControl("Pull", request, key);
}

absl::Status JobStores::CheckRoot() const {
  if (store_options_.checkpoint_root.empty()) {
    return absl::FailedPreconditionError(
        "this PS has no --checkpoint_root: it refuses every Save and Restore");
  }
  return absl::OkStatus();
}

absl::Status JobStores::CheckSaveName(const SaveRequest& request) {
  std::string dir;
  {
    absl::ReaderMutexLock lock(&mu_);
    auto it = checkpoint_dirs_.find(request.job());
    if (it != checkpoint_dirs_.end()) dir = it->second;
  }
  if (dir.empty()) {
    return absl::PermissionDeniedError(absl::StrCat(
        "Save of job '", request.job(),
        "': the job named no checkpoint directory when it created its variables here"));
  }
  // "." is the root itself (a job whose checkpoint directory is the root).
  if (dir != "." && !absl::StartsWith(request.name(), absl::StrCat(dir, "/"))) {
    return absl::PermissionDeniedError(absl::StrCat("Save of job '", request.job(), "': ",
                                                    request.name(), " is outside the job's "
                                                    "checkpoint directory ", dir));
  }
  if (checkpoint_quota_bytes_ > 0 && !store_options_.checkpoint_root.empty()) {
    absl::StatusOr<std::string> resolved =
        ResolveUnderRoot(store_options_.checkpoint_root, "--checkpoint_root", dir);
    if (resolved.ok()) {
      const int64_t used = BytesUnder(*resolved);
      if (used >= checkpoint_quota_bytes_) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "Save of job '", request.job(), "': its checkpoint directory ", dir, " holds ", used,
            " bytes, at or past this PS's quota of ", checkpoint_quota_bytes_,
            " (--checkpoint_quota_bytes); the coordinator's retention frees old checkpoints"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status JobStores::CreateVariables(const CreateVariablesRequest& request,
                                        CreateVariablesResponse* response) {
  RETURN_IF_ERROR(CheckJobId(request.job(), "CreateVariables"));
  bool held = false;
  RETURN_IF_ERROR(CheckControl("CreateVariables", request,
                               ControlKey(request.job(), request.job_key(), &held)));
  ASSIGN_OR_RETURN(
      std::shared_ptr<VariableStore> store,
      FindOrCreateWithKey(request.job(), request.job_key(), request.checkpoint_dir()));
  return store->CreateVariables(request, response);
}

absl::Status JobStores::Pull(const PullRequest& request, PullResponse* response) {
  RETURN_IF_ERROR(CheckPullAuth(request));
  ASSIGN_OR_RETURN(std::shared_ptr<VariableStore> store, Find(request.job()));
  return store->Pull(request, response);
}

absl::Status JobStores::Push(const PushRequest& request, PushResponse* response) {
  absl::Notification answered;
  absl::Status status;
  PushAsync(request, response, [&](absl::Status s) {
    status = std::move(s);
    answered.Notify();
  });
  answered.WaitForNotification();
  return status;
}

void JobStores::PushAsync(const PushRequest& request, PushResponse* response,
                          SyncSteps::Done done) {
  if (absl::Status s = CheckPushAuth(request); !s.ok()) return done(s);
  absl::StatusOr<std::shared_ptr<VariableStore>> store = Find(request.job());
  if (!store.ok()) return done(store.status());
  if (!request.has_update() || !request.update().has_sync()) {
    return done((*store)->Push(request, response));
  }
  SyncFor(request.job(), *store)->Push(request, response, std::move(done));
}

absl::Status JobStores::Save(const SaveRequest& request, SaveResponse* response) {
  RETURN_IF_ERROR(CheckRoot());
  RETURN_IF_ERROR(CheckJobId(request.job(), "Save"));
  bool held = false;
  const std::string key = ControlKey(request.job(), "", &held);
  // Never a file for a job this PS does not hold (it restarted, or the job
  // ended): the coordinator sees NOT_FOUND and restores the PS.
  if (!held) RETURN_IF_ERROR(Find(request.job()).status());
  RETURN_IF_ERROR(CheckControl("Save", request, key));
  RETURN_IF_ERROR(CheckSaveName(request));
  ASSIGN_OR_RETURN(std::shared_ptr<VariableStore> store, Find(request.job()));
  return store->Save(request, response);
}

absl::Status JobStores::Restore(const RestoreRequest& request, RestoreResponse* response) {
  RETURN_IF_ERROR(CheckRoot());
  RETURN_IF_ERROR(CheckJobId(request.job(), "Restore"));
  if (request.variables().job() != request.job()) {
    return absl::InvalidArgumentError(
        absl::StrCat("Restore into job '", request.job(), "' of variables of job '",
                     request.variables().job(), "'"));
  }
  bool held = false;
  RETURN_IF_ERROR(CheckControl("Restore", request,
                               ControlKey(request.job(), request.variables().job_key(), &held)));
  ASSIGN_OR_RETURN(std::shared_ptr<VariableStore> store,
                   FindOrCreateWithKey(request.job(), request.variables().job_key(),
                                       request.variables().checkpoint_dir()));
  // Steps half-pushed before the rollback belong to the old state.
  ResetSync(request.job(), "the job was restored from a checkpoint");
  return store->Restore(request, response);
}

absl::Status JobStores::PruneKeys(const PruneKeysRequest& request, PruneKeysResponse* response) {
  RETURN_IF_ERROR(CheckJobId(request.job(), "PruneKeys"));
  ASSIGN_OR_RETURN(std::shared_ptr<VariableStore> store, Find(request.job()));
  bool held = false;
  RETURN_IF_ERROR(CheckControl("PruneKeys", request, ControlKey(request.job(), "", &held)));
  return store->PruneKeys(request, response);
}

absl::Status JobStores::Stats(const StatsRequest& request, StatsResponse* response) {
  if (!request.job().empty()) {
    bool held = false;
    const std::string key = ControlKey(request.job(), "", &held);
    if (held) RETURN_IF_ERROR(CheckControl("Stats", request, key));
  }
  return LocalStats(request.job(), response);
}

absl::Status JobStores::LocalStats(const std::string& job_id, StatsResponse* response) {
  StatsRequest request;
  request.set_job(job_id);
  std::vector<std::pair<std::string, std::shared_ptr<VariableStore>>> stores;
  {
    absl::ReaderMutexLock lock(&mu_);
    stores.assign(stores_.begin(), stores_.end());
  }
  std::sort(stores.begin(), stores.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  int64_t held = 0;
  for (const auto& [job, store] : stores) {
    StatsResponse stats;
    RETURN_IF_ERROR(store->Stats(StatsRequest(), &stats));
    held += HeldBytes(stats);
    if (!request.job().empty() && job == request.job()) *response = std::move(stats);
  }
  response->set_checkpoint_root(!store_options_.checkpoint_root.empty());
  for (const auto& [job, store] : stores) response->add_jobs(job);
  response->set_held_bytes(held);
  response->set_incarnation(incarnation_);
  return absl::OkStatus();
}

absl::Status JobStores::EndJob(const EndJobRequest& request, EndJobResponse* response) {
  RETURN_IF_ERROR(CheckJobId(request.job(), "EndJob"));
  bool held = false;
  const std::string key = ControlKey(request.job(), "", &held);
  if (!held) return absl::OkStatus();
  RETURN_IF_ERROR(CheckControl("EndJob", request, key));
  std::shared_ptr<VariableStore> store;
  std::shared_ptr<SyncSteps> ended_sync;
  {
    absl::MutexLock lock(&mu_);
    auto it = stores_.find(request.job());
    if (it == stores_.end()) return absl::OkStatus();
    store = std::move(it->second);
    stores_.erase(it);
    keys_.erase(request.job());
    checkpoint_dirs_.erase(request.job());
    if (auto sync = syncs_.find(request.job()); sync != syncs_.end()) {
      ended_sync = std::move(sync->second.steps);
      syncs_.erase(sync);
    }
  }
  if (ended_sync != nullptr) ended_sync->Reset("the job ended");
  StatsResponse stats;
  RETURN_IF_ERROR(store->Stats(StatsRequest(), &stats));
  response->set_existed(true);
  response->set_variables(stats.variables_size());
  response->set_bytes(HeldBytes(stats));
  // The store is freed here, or by the last call still running on it.
  return absl::OkStatus();
}

}  // namespace pscluster
