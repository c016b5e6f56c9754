// JobStores: a PS task's job namespaces. Everything a job creates on a PS —
// variables, optimizer slots, hash tables, its exactly-once keys and step
// counters — lives in that job's own VariableStore, so that jobs run one
// after another on long-lived servers never see each other's state, and
// EndJob frees all of it at once.
//
// Every ParameterServer request names its job (`job`, "" being a namespace
// like any other, for tools and benchmarks); each method here routes the
// request to that job's store and has the store's contract
// (ps/core/variable_store.h), plus:
// - CreateVariables and Restore create the job's namespace if it is missing;
// - Pull, Push and PruneKeys of a job this PS holds nothing of are
//   NOT_FOUND naming the job (it never created variables here, has ended,
//   or this PS restarted and lost it: the coordinator then restores it);
//   Save of such a job writes a file of no variables (so the coordinator
//   sees that the PS lost them, as it checks the variables saved);
// - a namespace keeps the job key it was created with (CreateVariablesRequest.
//   job_key): CreateVariables or Restore of the job with another key is
//   PERMISSION_DENIED, and with a key every Push needs an UpdateKey whose
//   lease checks under it (common/update_lease.h), its step below the leased
//   count, else PERMISSION_DENIED and nothing applied;
// - Stats of such a job is empty, not an error; every Stats answer carries
//   the process's incarnation, every job held, and the bytes held in all.
//
// Pushes of synchronous steps (UpdateKey.sync, strategy: central_storage)
// go to the job's SyncSteps (sync_steps.h) after the lease check: PushAsync
// answers them when their step is applied; Push waits for that. A restore or
// the job's end abandons the job's pending steps (their waiters get ABORTED).
// A background thread expires waits past `sync_wait_timeout`.
//
// A request in flight keeps its store alive (shared ownership), so EndJob
// never frees memory under a running call; the store goes when the last
// call on it returns.
//
// Thread-safe.
#ifndef PSCLUSTER_PS_CORE_JOB_STORES_H_
#define PSCLUSTER_PS_CORE_JOB_STORES_H_

#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "protos/ps.pb.h"
#include "ps/core/memory_budget.h"
#include "ps/core/sync_steps.h"
#include "ps/core/variable_store.h"

namespace pscluster {

class JobStores {
 public:
  // `store_options` configures every job's store (shared metrics registry
  // included: the pscluster_ps_* counters count over all jobs).
  explicit JobStores(VariableStore::Options store_options,
                     absl::Duration sync_wait_timeout = absl::Seconds(20));
  JobStores() : JobStores(VariableStore::Options()) {}
  ~JobStores();

  JobStores(const JobStores&) = delete;
  JobStores& operator=(const JobStores&) = delete;

  absl::Status CreateVariables(const CreateVariablesRequest& request,
                               CreateVariablesResponse* response);
  absl::Status Pull(const PullRequest& request, PullResponse* response);
  // Blocks until a synchronous share is answered (see PushAsync).
  absl::Status Push(const PushRequest& request, PushResponse* response);
  // Push for callers that must not block: `done` runs exactly once, here or
  // (a synchronous share with a fused pull) on another thread once its step
  // is applied or its wait expires. `response` must live until then.
  void PushAsync(const PushRequest& request, PushResponse* response, SyncSteps::Done done);
  absl::Status Stats(const StatsRequest& request, StatsResponse* response);
  absl::Status Save(const SaveRequest& request, SaveResponse* response);
  absl::Status Restore(const RestoreRequest& request, RestoreResponse* response);
  absl::Status PruneKeys(const PruneKeysRequest& request, PruneKeysResponse* response);

  // Drops the job's namespace and everything in it (response->existed is
  // false, and nothing else set, if there was none). Never fails.
  absl::Status EndJob(const EndJobRequest& request, EndJobResponse* response);

  // Random per process: a new value means the PS restarted.
  uint64_t incarnation() const { return incarnation_; }

  // The memory budget every job's store shares (store_options.memory_budget):
  // CreateVariables, Restore, and pushes or pulls that would create
  // hash-table rows are RESOURCE_EXHAUSTED when they would take the bytes
  // held over all jobs past its limit. Null: no limit.
  const MemoryBudget* memory_budget() const { return store_options_.memory_budget.get(); }

 private:
  // The job's store; NOT_FOUND naming the job when it has none.
  absl::StatusOr<std::shared_ptr<VariableStore>> Find(const std::string& job)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The job's store, created empty when missing.
  std::shared_ptr<VariableStore> FindOrCreate(const std::string& job) ABSL_LOCKS_EXCLUDED(mu_);
  // FindOrCreate, recording `key` as the job's key if it had none;
  // PERMISSION_DENIED if it holds another.
  absl::StatusOr<std::shared_ptr<VariableStore>> FindOrCreateWithKey(const std::string& job,
                                                                     const std::string& key)
      ABSL_LOCKS_EXCLUDED(mu_);
  // OK for a job without a key; else PERMISSION_DENIED unless the push's
  // lease checks and its step lies below the leased count.
  absl::Status CheckUpdateLease(const PushRequest& request) ABSL_LOCKS_EXCLUDED(mu_);

  // The job's synchronous steps over `store`, created on first use.
  std::shared_ptr<SyncSteps> SyncFor(const std::string& job,
                                     const std::shared_ptr<VariableStore>& store)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Drops the job's synchronous steps (answering their waiters).
  void ResetSync(const std::string& job, const std::string& why) ABSL_LOCKS_EXCLUDED(mu_);
  void ExpireLoop();

  const VariableStore::Options store_options_;
  const absl::Duration sync_wait_timeout_;
  const uint64_t incarnation_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<VariableStore>> stores_ ABSL_GUARDED_BY(mu_);
  // Job keys of the namespaces in stores_ (absent or empty: no leases).
  absl::flat_hash_map<std::string, std::string> keys_ ABSL_GUARDED_BY(mu_);
  // Each entry holds its store alive as long as the entry exists.
  struct Sync {
    std::shared_ptr<VariableStore> store;
    std::shared_ptr<SyncSteps> steps;
  };
  absl::flat_hash_map<std::string, Sync> syncs_ ABSL_GUARDED_BY(mu_);
  absl::Mutex expire_mu_;
  bool stop_ ABSL_GUARDED_BY(expire_mu_) = false;
  std::thread expire_thread_;
};

}  // namespace pscluster

#endif  // PSCLUSTER_PS_CORE_JOB_STORES_H_
