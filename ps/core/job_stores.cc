#include "ps/core/job_stores.h"

#include <algorithm>
#include <limits>
#include <utility>
#include <vector>

#include "absl/random/random.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/update_lease.h"

namespace pscluster {
namespace {

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
  if (it == stores_.end()) {
    return absl::NotFoundError(
        absl::StrCat("job '", job,
                     "' holds nothing on this PS (it never created variables here, has ended, "
                     "or this PS restarted)"));
  }
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
    const std::string& job, const std::string& key) {
  std::shared_ptr<VariableStore> store = FindOrCreate(job);
  absl::MutexLock lock(&mu_);
  auto [it, inserted] = keys_.emplace(job, key);
  if (!inserted && it->second != key) {
    return absl::PermissionDeniedError(absl::StrCat(
        "job '", job, "' exists on this PS under another job key (another coordinator's job "
        "of the same id?); end it first"));
  }
  return store;
}

absl::Status JobStores::CheckUpdateLease(const PushRequest& request) {
  std::string key;
  {
    absl::ReaderMutexLock lock(&mu_);
    auto it = keys_.find(request.job());
    if (it != keys_.end()) key = it->second;
  }
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
  if (u.step() >= u.lease_steps()) {
    return absl::PermissionDeniedError(absl::StrCat(
        "push to job '", request.job(), "': step ", u.step(), " of closure ", u.closure_id(),
        " is past its lease of ", u.lease_steps(), " steps"));
  }
  return absl::OkStatus();
}

absl::Status JobStores::CreateVariables(const CreateVariablesRequest& request,
                                        CreateVariablesResponse* response) {
  ASSIGN_OR_RETURN(std::shared_ptr<VariableStore> store,
                   FindOrCreateWithKey(request.job(), request.job_key()));
  return store->CreateVariables(request, response);
}

absl::Status JobStores::Pull(const PullRequest& request, PullResponse* response) {
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
  absl::StatusOr<std::shared_ptr<VariableStore>> store = Find(request.job());
  if (!store.ok()) return done(store.status());
  if (absl::Status s = CheckUpdateLease(request); !s.ok()) return done(s);
  if (!request.has_update() || !request.update().has_sync()) {
    return done((*store)->Push(request, response));
  }
  SyncFor(request.job(), *store)->Push(request, response, std::move(done));
}

absl::Status JobStores::Save(const SaveRequest& request, SaveResponse* response) {
  absl::StatusOr<std::shared_ptr<VariableStore>> store = Find(request.job());
  // A job this PS holds nothing of (it restarted) saves an empty file, whose
  // zero variables tell the coordinator the PS lost them.
  if (!store.ok()) return VariableStore(store_options_).Save(request, response);
  return (*store)->Save(request, response);
}

absl::Status JobStores::Restore(const RestoreRequest& request, RestoreResponse* response) {
  ASSIGN_OR_RETURN(std::shared_ptr<VariableStore> store,
                   FindOrCreateWithKey(request.job(), request.variables().job_key()));
  // Steps half-pushed before the rollback belong to the old state.
  ResetSync(request.job(), "the job was restored from a checkpoint");
  return store->Restore(request, response);
}

absl::Status JobStores::PruneKeys(const PruneKeysRequest& request, PruneKeysResponse* response) {
  ASSIGN_OR_RETURN(std::shared_ptr<VariableStore> store, Find(request.job()));
  return store->PruneKeys(request, response);
}

absl::Status JobStores::Stats(const StatsRequest& request, StatsResponse* response) {
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
    if (job == request.job()) *response = std::move(stats);
  }
  for (const auto& [job, store] : stores) response->add_jobs(job);
  response->set_held_bytes(held);
  response->set_incarnation(incarnation_);
  return absl::OkStatus();
}

absl::Status JobStores::EndJob(const EndJobRequest& request, EndJobResponse* response) {
  std::shared_ptr<VariableStore> store;
  std::shared_ptr<SyncSteps> ended_sync;
  {
    absl::MutexLock lock(&mu_);
    auto it = stores_.find(request.job());
    if (it == stores_.end()) return absl::OkStatus();
    store = std::move(it->second);
    stores_.erase(it);
    keys_.erase(request.job());
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
