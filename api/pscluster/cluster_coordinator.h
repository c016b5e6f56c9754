// ClusterCoordinator: TF's ParameterServerStrategy / ClusterCoordinator
// programming model in C++ (issue 20). A program declares variables, which
// are partitioned and placed on the PS tasks as YAML jobs' are; it then
// schedules functions by name, with opaque argument bytes, onto the workers,
// and gets RemoteValues whose Fetch() gives the function's result bytes.
// The functions are C++ functions registered by name in a worker binary the
// user builds (function_worker.h); the Python face
// (python/coordinator_bindings.cc, python/worker_bindings.cc) passes pickled
// functions through the same name + bytes interface.
//
// The coordinator runs in the program's process, as TF's runs in the chief.
// Scheduling reuses the coordinator core (coordinator/core): the closure
// queue and the dispatch loop with its retries, the workers' health checks,
// exactly-once update leases. TF semantics:
//  * Schedule() returns at once; closures run on any free worker.
//  * A worker that fails (dies, stops answering) has its closures retried
//    on another; their pushes are applied once (UpdateKey under the lease).
//  * A function that fails (returns an error, throws) is not retried: its
//    RemoteValue's Fetch() returns the error (with the worker's traceback),
//    the closures not yet run are cancelled (Fetch: CANCELLED), and the
//    next Join(), Done() or Schedule() returns the error once, after which
//    the coordinator schedules again.
//
// Checkpoints and PS recovery are the coordinator core's, as YAML jobs'
// (program_recovery.h): Save / Restore (TF: strategy.save / restore) in the
// checkpoint format of docs/checkpoint_format.md, restorable into any PS
// count and partitioner; periodic checkpoints (Options); a PS that fails or
// restarts pauses dispatch, is restored from the newest checkpoint, and the
// closures that failed on it are retried; the steps rolled back are counted
// (lost_steps()).
//
// Not done (docs/cluster_coordinator.md): TLS and tokens,
// variables created after the first Schedule.
//
// Thread-safety: all methods are thread-safe; RemoteValue is too.
#ifndef PSCLUSTER_API_PSCLUSTER_CLUSTER_COORDINATOR_H_
#define PSCLUSTER_API_PSCLUSTER_CLUSTER_COORDINATOR_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/partitioner.h"
#include "protos/ps.pb.h"
#include "protos/worker.pb.h"

namespace pscluster {

class ProgramRecovery;

// TF's variable partitioners by name, for flags and configs:
//   "none" | "fixed:SHARDS" | "min_size:BYTES[:MAX_SHARDS]" |
//   "max_size:BYTES[:MAX_SHARDS]"
// INVALID_ARGUMENT naming the text for an unknown partitioner, a number
// that does not parse, or values ValidatePartitioner refuses.
absl::StatusOr<PartitionerSpec> ParsePartitioner(absl::string_view text);

// The result of one scheduled function, filled in when its closure ends.
class RemoteValue {
 public:
  struct State;
  explicit RemoteValue(std::shared_ptr<State> state) : state_(std::move(state)) {}

  // Blocks until the closure ended; returns the function's result bytes, or:
  //  - the function's own error: its code when the error's type names one
  //    (the C++ functions' absl status codes), else UNKNOWN; the message
  //    "function 'NAME' (closure ID) raised TYPE: MESSAGE" and the
  //    traceback on the next lines;
  //  - CANCELLED: an earlier closure failed and this one did not run (the
  //    message names that failure);
  //  - the cluster's error after the closure failed max_attempts times
  //    (e.g. UNAVAILABLE), naming the closure and the last worker.
  absl::StatusOr<std::string> Fetch() const;
  // The function's error as the worker sent it, once ended with one.
  std::optional<FunctionError> function_error() const;
  bool ready() const;
  // Waits at most `timeout` for the closure to end; whether it has. Lets a
  // caller that must stay responsive (Python's Ctrl-C) wait in slices.
  bool WaitFor(absl::Duration timeout) const;
  int64_t closure_id() const;

 private:
  std::shared_ptr<State> state_;
};

class ClusterCoordinator {
 public:
  struct Options {
    // The cluster: PS and worker addresses ("host:port"), or `cluster_file`
    // (a cluster YAML as the servers take, common/cluster_config.h) when
    // both lists are empty.
    std::vector<std::string> ps_addresses;
    std::vector<std::string> worker_addresses;
    std::string cluster_file;
    // The job's name on the servers; empty: "program-<random hex>". Each
    // coordinator needs its own (its closure ids start again from 1).
    std::string job_id;
    // TF's variable_partitioner: how variables are split along axis 0
    // (ParsePartitioner). Default: none.
    PartitionerSpec partitioner;
    // Dispatch threads per worker (closures in flight on each).
    int closures_per_worker = 1;
    // A closure that fails this many times on workers (not counting
    // workers declared lost) fails, with the others cancelled.
    int max_attempts = 3;
    absl::Duration retry_backoff = absl::Milliseconds(200);
    // The pushes one closure's lease covers: a function that pushes more
    // gets INVALID_ARGUMENT from the push.
    int64_t max_steps_per_closure = 1 << 20;
    // Workers' health checks: every health_interval; one that fails them
    // for worker_timeout is declared lost and its closures re-run elsewhere.
    absl::Duration health_interval = absl::Seconds(1);
    absl::Duration worker_timeout = absl::Seconds(20);
    // How long the first Schedule waits for the servers to answer.
    absl::Duration cluster_wait = absl::Seconds(60);
    // Deadline of each PS call of the coordinator's and each closure.
    absl::Duration ps_timeout = absl::Seconds(30);
    absl::Duration closure_timeout = absl::Minutes(5);

    // Checkpoints (Save, Restore, periodic ones, PS recovery): the PS
    // tasks' --checkpoint_root as this program reaches it (a file system
    // they share). Empty: Save and Restore are FAILED_PRECONDITION, and a
    // PS that restarts rolls the job back to the initializers.
    std::string checkpoint_root;
    // Periodic checkpoints into this directory (relative to the root, or
    // absolute under it): after every `checkpoint_every_steps` steps and/or
    // `checkpoint_every` (0: off), taken between closures (dispatch pauses,
    // the closures in flight end). A PS recovery restores the newest
    // checkpoint this coordinator saved or restored (periodic or Save).
    // Empty: none.
    std::string checkpoint_dir;
    int64_t checkpoint_every_steps = 0;
    absl::Duration checkpoint_every = absl::ZeroDuration();
    // Committed checkpoints kept in each directory (older ones deleted).
    int64_t checkpoint_keep = 3;
    // How long a PS recovery waits for every PS to answer again before the
    // job fails (Join returns the error).
    absl::Duration ps_recovery_timeout = absl::Seconds(60);
  };

  // INVALID_ARGUMENT for no PS or no worker, an address that is not
  // host:port, a bad partitioner, closures_per_worker or max_attempts < 1;
  // the cluster file's errors. Connects nothing yet.
  static absl::StatusOr<std::unique_ptr<ClusterCoordinator>> Create(Options options);
  // Cancels what is queued, waits for closures in flight, releases the
  // workers and frees the job's variables on the PS.
  ~ClusterCoordinator();

  // Declares a float32 variable (TF: created under strategy.scope()).
  // INVALID_ARGUMENT naming the variable for an empty name, a dimension < 1
  // ("a variable shape of 0"), an initializer or optimizer type the PS does
  // not know; ALREADY_EXISTS for a name declared before; FAILED_PRECONDITION
  // after the first Schedule (the variables are created then).
  absl::Status CreateVariable(const std::string& name, std::vector<int64_t> shape,
                              InitializerProto initializer, OptimizerProto optimizer)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Declares a bounded hash table (a dynamic vocabulary, as YAML jobs'
  // hashed embeddings): int64 id -> float32 row of `dim`, one shard per PS
  // (id -> shard by HashTableShard), a row created by `initializer` on
  // first touch; past `max_rows` rows per shard (0: unbounded) the PS
  // evicts by `eviction` (LFU or AGE). Functions read and update it by
  // rows only (FunctionContext::PullRows / PushRows). Checkpoints re-hash
  // its rows into any PS count. Errors as CreateVariable; INVALID_ARGUMENT
  // for dim < 1 or max_rows < 0.
  absl::Status CreateHashTable(const std::string& name, int64_t dim, int64_t max_rows,
                               EvictionPolicy eviction, InitializerProto initializer,
                               OptimizerProto optimizer) ABSL_LOCKS_EXCLUDED(mu_);

  // Queues function `function` of the workers with `args`. The first call
  // creates the variables on the PS and sets up the workers (errors:
  // INVALID_ARGUMENT from the partitioner or the PS, UNAVAILABLE naming a
  // server that did not answer within cluster_wait). Returns the error of a
  // failed closure not yet raised by Join or Done (then clears it).
  // An unknown function name fails its closure with NOT_FOUND (at Fetch).
  absl::StatusOr<RemoteValue> Schedule(const std::string& function, std::string args)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Blocks until every scheduled closure ended. OK, or the first failed
  // closure's error (see RemoteValue::Fetch; raised once). Returns at once
  // when nothing is scheduled.
  absl::Status Join() ABSL_LOCKS_EXCLUDED(mu_);
  // Join for at most `timeout`: true (or the failed closure's error, as
  // Join) when every scheduled closure ended, false when some still run.
  absl::StatusOr<bool> JoinFor(absl::Duration timeout) ABSL_LOCKS_EXCLUDED(mu_);
  // Without blocking: true when every scheduled closure ended; a failed
  // closure's error as Join.
  absl::StatusOr<bool> Done() ABSL_LOCKS_EXCLUDED(mu_);

  // TF's strategy.save(dir): a checkpoint of every variable (values,
  // optimizer slots, update keys, step counters) into `dir` (relative to
  // checkpoint_root, or absolute under it; created if missing), as a new
  // ckpt-<id> (the newest checkpoint_keep are kept). A consistent cut:
  // dispatch pauses and the closures in flight end first; queued closures
  // run after it. Before the first Schedule it creates the variables (and
  // saves their initial values). Errors: FAILED_PRECONDITION without a
  // checkpoint_root; INVALID_ARGUMENT for a dir outside the root; a PS's or
  // the storage's error naming it; the error of a PS recovery that failed.
  absl::Status Save(const std::string& dir) ABSL_LOCKS_EXCLUDED(control_mu_, mu_);
  // TF's strategy.restore(dir): the newest committed checkpoint of `dir`,
  // whatever PS count and partitioner saved it, re-sharded into this job's
  // layout. Before the first Schedule it creates the variables and fills
  // them from the checkpoint; after it, it replaces their values between
  // closures (as Save pauses). global_step() becomes the checkpoint's.
  // NOT_FOUND naming `dir` when it does not exist or holds no committed
  // checkpoint; FAILED_PRECONDITION naming the variable when the checkpoint
  // lacks one of the job's or saved it with another shape (nothing is
  // changed then: before the first Schedule the variables exist with their
  // initializers' values); errors as Save.
  absl::Status Restore(const std::string& dir) ABSL_LOCKS_EXCLUDED(control_mu_, mu_);

  // Steps (pushes) of the closures that ended, as their workers counted
  // them: each closure counted once however often it ran.
  int64_t steps() const { return steps_.load(); }
  // Of steps(), those a PS recovery rolled back: applied after the
  // checkpoint it restored (all of them when there was none). Their
  // closures are not run again.
  int64_t lost_steps() ABSL_LOCKS_EXCLUDED(mu_);
  // The steps the variables hold: what each PS that every step reaches has
  // applied (PsStats' applied_steps). steps() - lost_steps() when the
  // program restored nothing; after a Restore, the checkpoint's step plus
  // the steps since, less those lost since.
  int64_t global_step() ABSL_LOCKS_EXCLUDED(mu_);
  // PS failures healed so far.
  int64_t ps_recoveries() ABSL_LOCKS_EXCLUDED(mu_);
  // The job's statistics on each PS (applied and duplicate steps, the
  // variables). FAILED_PRECONDITION before the first Schedule.
  absl::StatusOr<std::vector<StatsResponse>> PsStats() ABSL_LOCKS_EXCLUDED(mu_);
  const std::string& job_id() const { return options_.job_id; }

 private:
  struct Cluster;  // connections, plan, health watch (cluster_coordinator.cc)
  struct Session;  // one run of the queue and its dispatch threads

  explicit ClusterCoordinator(Options options);
  // Checks `spec`'s initializer and optimizer and adds it (CreateVariable).
  absl::Status Declare(VariableSpecProto spec) ABSL_LOCKS_EXCLUDED(mu_);
  // Creates the variables and sets up the workers, once.
  absl::Status StartLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Starts session_ (queue, dispatch and control threads) if none.
  void StartSessionLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A session's control thread: heals PS failures and takes periodic
  // checkpoints with dispatch paused, until the session's queue stops.
  void ControlLoop(Session* session, ProgramRecovery* recovery)
      ABSL_LOCKS_EXCLUDED(control_mu_, mu_);
  // Runs `op` with no closure in flight (dispatch paused), after healing a
  // PS failure; a recovery that fails stops the session with its error.
  // Starts the cluster first.
  absl::Status Quiesced(const std::function<absl::Status(ProgramRecovery*)>& op)
      ABSL_LOCKS_EXCLUDED(control_mu_, mu_);
  // The next closure id, and the smallest id of a closure not ended yet
  // (the next id when none).
  std::pair<int64_t, int64_t> ClosureIds() ABSL_LOCKS_EXCLUDED(mu_);
  // Ends the session: stops its queue, joins its threads.
  void EndSession(std::shared_ptr<Session> session) ABSL_LOCKS_EXCLUDED(mu_);
  // The failed session's error, the session ended; OK (and nothing done)
  // when the session has not failed.
  absl::Status RaiseIfFailed() ABSL_LOCKS_EXCLUDED(mu_);
  // Fills closure `id`'s value (the first result wins).
  void Resolve(int64_t id, absl::StatusOr<std::string> value,
               std::optional<FunctionError> error = std::nullopt) ABSL_LOCKS_EXCLUDED(mu_);
  void CancelPending(const absl::Status& why) ABSL_LOCKS_EXCLUDED(mu_);

  Options options_;
  std::atomic<int64_t> steps_{0};
  // Serializes what runs with dispatch paused (checkpoints, restores,
  // recoveries): each pauses and resumes the queue.
  absl::Mutex control_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  // Held while the first Schedule starts the cluster (no closure runs
  // then), never while a session's threads are joined.
  absl::Mutex mu_;
  std::vector<VariableSpecProto> variables_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<Cluster> cluster_ ABSL_GUARDED_BY(mu_);
  // Shared with Join()s waiting on its queue; whoever takes it out of
  // session_ ends it.
  std::shared_ptr<Session> session_ ABSL_GUARDED_BY(mu_);
  int64_t next_closure_id_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<int64_t, std::shared_ptr<RemoteValue::State>> pending_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pscluster

#endif  // PSCLUSTER_API_PSCLUSTER_CLUSTER_COORDINATOR_H_
