#include "ps/core/sync_steps.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"

namespace pscluster {
namespace {

std::string StepName(const std::string& job, int64_t closure_id, int64_t step) {
  return absl::StrCat("synchronous step ", step, " of closure ", closure_id, " (job '", job, "')");
}

}  // namespace

SyncSteps::SyncSteps(VariableStore* store, absl::Duration wait_timeout)
    : store_(store), wait_timeout_(wait_timeout) {}

SyncSteps::~SyncSteps() { Reset("the job ended on this PS"); }

int64_t SyncSteps::applied_steps() const {
  absl::MutexLock lock(&mu_);
  return applied_steps_;
}

int64_t SyncSteps::expired_waits() const {
  absl::MutexLock lock(&mu_);
  return expired_waits_;
}

absl::Status SyncSteps::Add(const PushRequest& request, int64_t examples, Step* step) {
  // An empty slice: its (zero) gradients weigh nothing.
  if (examples == 0) return absl::OkStatus();
  return step->sum.Add(request, static_cast<float>(examples));
}

void SyncSteps::Push(const PushRequest& request, PushResponse* response, Done done) {
  const UpdateKey& key = request.update();
  const SyncShare& share = key.sync();
  const std::string name = StepName(request.job(), key.closure_id(), key.step());
  if (share.replicas() < 1 || share.replica() < 0 || share.replica() >= share.replicas()) {
    done(absl::InvalidArgumentError(absl::StrCat(name, ": replica ", share.replica(), " of ",
                                                 share.replicas(), " is not a replica")));
    return;
  }
  if (share.examples() < 0) {
    done(absl::InvalidArgumentError(absl::StrCat(name, ": replica ", share.replica(), " gave ",
                                                 share.examples(), " examples")));
    return;
  }
  // The gradients must be ones Push would take, before they are summed.
  if (absl::Status s = store_->CheckPush(request); !s.ok()) {
    done(s);
    return;
  }
  std::vector<Answer> answers;
  {
    absl::MutexLock lock(&mu_);
    const Key k{key.closure_id(), key.step()};
    if (store_->KeyApplied(k.first, k.second)) {
      // A retried replica's share of a step that is done.
      response->set_duplicate(true);
      store_->CountDuplicate();
      absl::Status s;
      if (request.has_pull()) s = store_->Pull(request.pull(), response->mutable_pulled());
      answers.emplace_back(std::move(done), s);
    } else {
      auto it = pending_.find(k);
      if (it == pending_.end()) {
        if (static_cast<int>(pending_.size()) >= kMaxPendingSteps) {
          answers.emplace_back(std::move(done),
                               absl::ResourceExhaustedError(absl::StrCat(
                                   name, ": ", pending_.size(),
                                   " synchronous steps are already waiting for replicas")));
        } else {
          it = pending_.emplace(k, Step()).first;
          it->second.replicas = share.replicas();
          it->second.pushed.assign(static_cast<size_t>(share.replicas()), false);
          it->second.global_step = key.has_global_step() ? key.global_step() : -1;
        }
      }
      if (answers.empty()) {
        Step& step = it->second;
        absl::Status s;
        if (share.replicas() != step.replicas) {
          s = absl::InvalidArgumentError(
              absl::StrCat(name, ": replica ", share.replica(), " counts ", share.replicas(),
                           " replicas, the step's first share ", step.replicas));
        } else if (!step.pushed[static_cast<size_t>(share.replica())]) {
          s = Add(request, share.examples(), &step);
          if (s.ok()) {
            step.pushed[static_cast<size_t>(share.replica())] = true;
            step.examples += share.examples();
          }
        } else {
          response->set_duplicate(true);  // this replica's share is in already
          store_->CountDuplicate();
        }
        if (!s.ok()) {
          answers.emplace_back(std::move(done), s);
        } else {
          if (request.has_pull()) {
            step.waiters.push_back(
                Waiter{request.pull(), response, std::move(done), absl::Now() + wait_timeout_});
          } else {
            answers.emplace_back(std::move(done), absl::OkStatus());
          }
          if (std::all_of(step.pushed.begin(), step.pushed.end(), [](bool b) { return b; })) {
            Step complete = std::move(step);
            pending_.erase(it);
            Apply(k, std::move(complete), &answers);
          }
        }
      }
    }
  }
  for (auto& [d, s] : answers) d(s);
}

void SyncSteps::Apply(const Key& key, Step step, std::vector<Answer>* answers) {
  PushRequest apply;
  UpdateKey* u = apply.mutable_update();
  u->set_closure_id(key.first);
  u->set_step(key.second);
  if (step.global_step >= 0) u->set_global_step(step.global_step);
  if (step.examples > 0) step.sum.WriteTo(1.0f / static_cast<float>(step.examples), &apply);
  PushResponse ignored;
  const absl::Status applied = store_->Push(apply, &ignored);
  if (applied.ok()) ++applied_steps_;
  for (Waiter& w : step.waiters) {
    absl::Status s = applied;
    if (s.ok()) s = store_->Pull(w.pull, w.response->mutable_pulled());
    answers->emplace_back(std::move(w.done), s);
  }
}

void SyncSteps::Expire(absl::Time now) {
  std::vector<Answer> answers;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [key, step] : pending_) {
      auto late = [now](const Waiter& w) { return w.deadline <= now; };
      if (std::none_of(step.waiters.begin(), step.waiters.end(), late)) continue;
      std::vector<int> missing;
      for (size_t r = 0; r < step.pushed.size(); ++r) {
        if (!step.pushed[r]) missing.push_back(static_cast<int>(r));
      }
      const std::string why = absl::StrCat(
          "synchronous step ", key.second, " of closure ", key.first, ": waited ",
          absl::FormatDuration(wait_timeout_), " for replica(s) ", absl::StrJoin(missing, ", "),
          " of ", step.replicas, "; the shares in are kept for their retry");
      std::vector<Waiter> keep;
      for (Waiter& w : step.waiters) {
        if (late(w)) {
          ++expired_waits_;
          answers.emplace_back(std::move(w.done), absl::AbortedError(why));
        } else {
          keep.push_back(std::move(w));
        }
      }
      step.waiters = std::move(keep);
    }
  }
  for (auto& [d, s] : answers) d(s);
}

void SyncSteps::Reset(const std::string& why) {
  std::vector<Answer> answers;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [key, step] : pending_) {
      for (Waiter& w : step.waiters) {
        answers.emplace_back(std::move(w.done), absl::AbortedError(absl::StrCat(
                                                    "synchronous step ", key.second, " of closure ",
                                                    key.first, " abandoned: ", why)));
      }
    }
    pending_.clear();
  }
  for (auto& [d, s] : answers) d(s);
}

}  // namespace pscluster
