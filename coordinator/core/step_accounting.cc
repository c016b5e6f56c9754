#include "coordinator/core/step_accounting.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace pscluster {

std::vector<StepReach> StepReachOf(const VariablePlan& plan, Strategy strategy) {
  std::vector<StepReach> reach;
  reach.reserve(plan.per_ps.size());
  for (const CreateVariablesRequest& ps : plan.per_ps) {
    if (ps.variables_size() == 0) {
      reach.push_back(StepReach::kNone);
      continue;
    }
    // A synchronous step needs every PS that holds variables to hear from
    // every replica (worker/core/trainer.cc), with or without gradients.
    bool every = IsSynchronous(strategy);
    for (const VariableSpecProto& v : ps.variables()) every = every || !IsRowAccessed(v);
    reach.push_back(every ? StepReach::kEveryStep : StepReach::kSomeSteps);
  }
  return reach;
}

std::vector<PsSteps> AskPsSteps(const std::vector<PsClient*>& ps, const std::string& job,
                                const std::vector<StepReach>& reach) {
  std::vector<PsSteps> out(ps.size());
  StatsRequest request;
  request.set_job(job);
  for (size_t p = 0; p < ps.size(); ++p) {
    if (p >= reach.size() || reach[p] == StepReach::kNone) continue;
    StatsResponse stats;
    const absl::Status s = ps[p]->Stats(request, &stats);
    if (!s.ok()) {
      out[p].error = s.ToString();
      continue;
    }
    out[p].answered = true;
    // A PS that holds nothing of a job answers with empty stats.
    out[p].holds_job = stats.variables_size() > 0;
    out[p].applied_steps = stats.applied_steps();
    out[p].duplicate_steps = stats.duplicate_steps();
    out[p].incarnation = stats.incarnation();
  }
  return out;
}

std::vector<StepDiscrepancy> CompareSteps(const StepLedger& ledger,
                                          const std::vector<StepReach>& reach,
                                          const std::vector<PsSteps>& ps,
                                          const std::vector<uint64_t>& known_incarnations) {
  std::vector<StepDiscrepancy> found;
  for (size_t p = 0; p < ps.size() && p < reach.size(); ++p) {
    const PsSteps& s = ps[p];
    if (reach[p] == StepReach::kNone || !s.answered) continue;
    StepDiscrepancy d;
    d.ps = static_cast<int>(p);
    const uint64_t known = p < known_incarnations.size() ? known_incarnations[p] : 0;
    if (!s.holds_job) {
      d.kind = StepDiscrepancy::Kind::kStateGone;
      d.restarted = known != 0 && s.incarnation != known;
      if (known == 0) {
        d.message = absl::StrCat("PS ", p, " holds nothing of the job");
      } else if (d.restarted) {
        d.message = absl::StrCat("PS ", p,
                                 " restarted (new incarnation) and holds nothing of the job: "
                                 "its variables and applied steps are gone");
      } else {
        d.message = absl::StrCat(
            "PS ", p,
            " holds nothing of the job although it did not restart (same incarnation): the job "
            "was ended there behind the coordinator's back");
      }
      found.push_back(std::move(d));
      continue;
    }
    const std::string numbers =
        absl::StrCat("PS ", p, " applied ", s.applied_steps, " of ", ledger.steps,
                     " steps (duplicates ", s.duplicate_steps, ", lost ", ledger.lost_steps, ")");
    if (s.applied_steps < ledger.steps && reach[p] == StepReach::kEveryStep) {
      d.kind = StepDiscrepancy::Kind::kFewer;
      d.message =
          absl::StrCat(numbers, ": updates were dropped behind the coordinator's back");
      found.push_back(std::move(d));
    } else if (s.applied_steps > ledger.steps && ledger.point == AccountingPoint::kEnd) {
      d.kind = StepDiscrepancy::Kind::kMore;
      d.message = absl::StrCat(numbers, ": it applied steps the coordinator did not count");
      found.push_back(std::move(d));
    }
  }
  return found;
}

absl::Status AccountingError(const std::vector<StepDiscrepancy>& found) {
  if (found.empty()) return absl::OkStatus();
  std::vector<std::string> messages;
  messages.reserve(found.size());
  for (const StepDiscrepancy& d : found) messages.push_back(d.message);
  return absl::DataLossError(absl::StrJoin(messages, "; "));
}

}  // namespace pscluster
