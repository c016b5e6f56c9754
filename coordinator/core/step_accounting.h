// Step accounting: whether what each PS applied of a job agrees with the
// training steps the coordinator counts, so that a job whose updates were
// dropped, or whose state was ended or pruned behind the coordinator's back,
// never ends SUCCEEDED and never claims fewer lost steps than it lost.
//
// The invariant (exactly once): every step the coordinator counts done and
// not lost (JobStatus.steps) was applied once on each PS that every step
// reaches, and no other step was. A step's keyed push that a PS had already
// applied (a retried closure, a synchronous replica's share sent again) is
// dropped there and counted in StatsResponse.duplicate_steps: those are
// honest and not judged here — a step dropped as a duplicate that was never
// applied shows up as an applied count below the coordinator's. The counters
// live in the job's namespace on each PS and are saved in checkpoints and
// restored with them, so a rollback rewinds them with the coordinator's count
// (JobStatus.steps goes back to the checkpoint's step).
//
// Which steps reach a PS (StepReachOf):
// - parameter_server (and one_device, mirrored): a worker pushes each step to
//   every PS its step touches. A PS holding a variable read whole (a dense
//   layer's kernel or bias, or a shard of one) hears of every step; a PS
//   holding only row-accessed variables (embedding tables, hash tables) only
//   of the steps whose batch touches its rows.
// - central_storage, multi_worker_mirrored: every PS holding any variable of
//   the job hears from every replica on every step and applies the step once
//   (ps/core/sync_steps.h; the copies' all-reduce).
// - A PS holding nothing of the job hears of no step.
//
// Pure functions, except AskPsSteps (which calls the PS); thread-safe.
#ifndef PSCLUSTER_COORDINATOR_CORE_STEP_ACCOUNTING_H_
#define PSCLUSTER_COORDINATOR_CORE_STEP_ACCOUNTING_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/job_spec.h"
#include "common/model_variables.h"
#include "common/ps_client.h"

namespace pscluster {

enum class StepReach {
  kNone,       // holds no variable of the job: not judged
  kSomeSteps,  // only row-accessed variables: at most every step
  kEveryStep,  // every step
};

// Which steps reach each PS of `plan` (index p = PS p) under `strategy`.
std::vector<StepReach> StepReachOf(const VariablePlan& plan, Strategy strategy);

// One PS's answer to Stats of the job.
struct PsSteps {
  // False: not asked (kNone) or no answer; the fields below are then unknown.
  bool answered = false;
  std::string error;  // why it did not answer
  // The PS holds the job's variables (Stats listed some).
  bool holds_job = false;
  int64_t applied_steps = 0;
  int64_t duplicate_steps = 0;
  uint64_t incarnation = 0;
};

// Asks every PS whose reach is not kNone for the Stats of `job`.
// REQUIRES: reach.size() == ps.size().
std::vector<PsSteps> AskPsSteps(const std::vector<PsClient*>& ps, const std::string& job,
                                const std::vector<StepReach>& reach);

enum class AccountingPoint {
  // Every closure of the counted steps finished and none is left (the end of
  // the job): each kEveryStep PS applied exactly the counted steps, and a
  // kSomeSteps PS at most as many.
  kEnd,
  // No closure in flight, but some may be unfinished (a checkpoint, after a
  // recovery): a closure that failed part way applied steps not counted yet,
  // so a kEveryStep PS holds at least the counted steps.
  kQuiescent,
};

// The coordinator's side of the comparison.
struct StepLedger {
  int64_t steps = 0;       // done and not lost (JobStatus.steps)
  int64_t lost_steps = 0;  // rolled back so far (JobStatus.lost_steps), for the messages
  AccountingPoint point = AccountingPoint::kEnd;
};

// A PS that disagrees with the ledger.
struct StepDiscrepancy {
  enum class Kind {
    kStateGone,  // it holds nothing of the job
    kFewer,      // it applied fewer steps than the ledger counts
    kMore,       // it applied more (kEnd only)
  };
  int ps = 0;
  Kind kind = Kind::kFewer;
  // kStateGone: its incarnation changed since the job's state there was
  // created or restored (a restart, not an end behind the coordinator's back).
  bool restarted = false;
  // Names the PS and the numbers, e.g. "PS 1 applied 1876 of 9380 steps
  // (duplicates 7504, lost 0): updates were dropped behind the coordinator's
  // back".
  std::string message;
};

// The PS of `ps` that disagree with `ledger`, in PS order; PS that did not
// answer are skipped (the caller decides what an unanswered PS means).
// `known_incarnations[p]`: PS p's incarnation when the job's state there was
// last created or restored (0 or missing: unknown, then a PS that holds
// nothing is not said to have restarted or not).
// REQUIRES: reach.size() == ps.size().
std::vector<StepDiscrepancy> CompareSteps(const StepLedger& ledger,
                                          const std::vector<StepReach>& reach,
                                          const std::vector<PsSteps>& ps,
                                          const std::vector<uint64_t>& known_incarnations);

// OK when `found` is empty; else DATA_LOSS with every message, "; "-joined.
absl::Status AccountingError(const std::vector<StepDiscrepancy>& found);

}  // namespace pscluster

#endif  // PSCLUSTER_COORDINATOR_CORE_STEP_ACCOUNTING_H_
