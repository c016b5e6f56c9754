// JobStores: a PS task's job namespaces. Everything a job creates on a PS —
// variables, optimizer slots, hash tables, its exactly-once keys and step
// counters — lives in that job's own VariableStore, so that jobs run one
// after another on long-lived servers never see each other's state, and
// EndJob frees all of it at once.
//
// Every ParameterServer request names its job (never "": INVALID_ARGUMENT;
// StatsRequest's "" asks for the process's stats alone); each method here
// routes the request to that job's store and has the store's contract
// (ps/core/variable_store.h), plus:
// - only the job's coordinator steers a job: a namespace created with a key
//   takes CreateVariables, Restore, Save, EndJob, PruneKeys, Stats of the
//   job and a Pull without a closure's lease only with a ControlAuth MAC
//   under that key (common/control_auth.h), else PERMISSION_DENIED and
//   nothing changes. A new namespace's request is checked under the key it
//   brings. Keyless namespaces (tools, benchmarks, in-process runs) are
//   refused once RequireJobKeys() was called or any job gave a key here;
// - Save writes only for a job this PS holds (else NOT_FOUND), only files
//   strictly under the checkpoint directory its CreateVariables or Restore
//   named (else PERMISSION_DENIED), never over an existing file
//   (ALREADY_EXISTS), and not once that directory holds
//   `checkpoint_quota_bytes` (RESOURCE_EXHAUSTED). Nothing here deletes a
//   checkpoint: retention is the coordinator's;
// - CreateVariables and Restore create the job's namespace if it is missing;
// - Pull, Push and PruneKeys of a job this PS holds nothing of are
//   NOT_FOUND naming the job (it never created variables here, has ended,
//   or this PS restarted and lost it: the coordinator then restores it);
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

#include <atomic>
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

  // Refuses keyless namespaces from now on (ps_server does, unless
  // --allow_keyless_jobs). Call before serving.
  void RequireJobKeys() { keyless_refused_ = true; }
  // Save refuses to write once the job's checkpoint directory holds this many
  // bytes (0: no quota). Call before serving.
  void set_checkpoint_quota_bytes(int64_t bytes) { checkpoint_quota_bytes_ = bytes; }

  // The data plane's checks on a request's meta (its tensors' bytes not yet
  // read): the job is held here, and a push of a keyed job carries a valid
  // lease (CheckPushAuth) or a pull one of its closure's leases or the
  // coordinator's MAC (CheckPullAuth). Push and Pull run them too.
  absl::Status CheckPushAuth(const PushRequest& request) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status CheckPullAuth(const PullRequest& request) ABSL_LOCKS_EXCLUDED(mu_);

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
  // Stats of `job` ("": the process's) without the coordinator's proof: for
  // this process's own use (its /metrics), never for a request.
  absl::Status LocalStats(const std::string& job, StatsResponse* response);
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
  // FindOrCreate, recording `key` as the job's key (and `checkpoint_dir` as
  // its checkpoint directory) if it had none; PERMISSION_DENIED if it holds
  // another key, or if it has none and keyless namespaces are refused.
  absl::StatusOr<std::shared_ptr<VariableStore>> FindOrCreateWithKey(
      const std::string& job, const std::string& key, const std::string& checkpoint_dir)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The key a control request of `job` must be signed under: the
  // namespace's, or `new_key` for a job this PS does not hold. `held`: whether
  // it holds the job.
  std::string ControlKey(const std::string& job, const std::string& new_key, bool* held)
      ABSL_LOCKS_EXCLUDED(mu_);
  // OK if the request carries ControlAuth under `key` (or `key` is empty and
  // keyless jobs are allowed); else PERMISSION_DENIED naming the method.
  template <typename R>
  absl::Status CheckControl(const std::string& method, const R& request, const std::string& key);
  // FAILED_PRECONDITION naming --checkpoint_root when this PS has none.
  absl::Status CheckRoot() const;
  // Save's confinement: under the job's directory, below its quota.
  absl::Status CheckSaveName(const SaveRequest& request) ABSL_LOCKS_EXCLUDED(mu_);

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
  // Checkpoint directories (relative to the root) of the namespaces.
  absl::flat_hash_map<std::string, std::string> checkpoint_dirs_ ABSL_GUARDED_BY(mu_);
  // Keyless namespaces are refused (RequireJobKeys, or a job gave a key).
  std::atomic<bool> keyless_refused_{false};
  int64_t checkpoint_quota_bytes_ = 0;
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
