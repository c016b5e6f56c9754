#include "ps/core/applied_update_ledger.h"

#include <algorithm>
#include <utility>
#include <vector>

namespace pscluster {

bool AppliedUpdateLedger::Claim(int64_t closure_id, int64_t step) {
  absl::MutexLock lock(&mu_);
  // A closure below the watermark finished before a committed checkpoint:
  // its keys were forgotten, and any push of it is a repeat.
  const bool first = closure_id >= retired_below_ && keys_.emplace(closure_id, step).second;
  if (first) {
    ++applied_steps_;
  } else {
    ++duplicate_steps_;
  }
  return first;
}

bool AppliedUpdateLedger::Contains(int64_t closure_id, int64_t step) const {
  absl::MutexLock lock(&mu_);
  return closure_id < retired_below_ || keys_.contains({closure_id, step});
}

void AppliedUpdateLedger::CountDuplicate() {
  absl::MutexLock lock(&mu_);
  ++duplicate_steps_;
}

AppliedUpdateLedger::Pruned AppliedUpdateLedger::RetireBelow(int64_t closure_id) {
  absl::MutexLock lock(&mu_);
  const int64_t before = static_cast<int64_t>(keys_.size());
  if (closure_id > retired_below_) {
    retired_below_ = closure_id;
    // The predicate gets a copy: it is not analysed as running under mu_.
    const int64_t below = retired_below_;
    absl::erase_if(keys_, [below](const Key& key) { return key.first < below; });
    // erase_if leaves the table's capacity; rehash(0) shrinks it to fit.
    keys_.rehash(0);
  }
  Pruned out;
  out.remaining = static_cast<int64_t>(keys_.size());
  out.pruned = before - out.remaining;
  return out;
}

AppliedUpdateLedger::Counts AppliedUpdateLedger::GetCounts() const {
  absl::MutexLock lock(&mu_);
  Counts out;
  out.applied_steps = applied_steps_;
  out.duplicate_steps = duplicate_steps_;
  out.held_keys = static_cast<int64_t>(keys_.size());
  return out;
}

AppliedKeys AppliedUpdateLedger::ToProto() const {
  AppliedKeys out;
  absl::MutexLock lock(&mu_);
  std::vector<Key> sorted(keys_.begin(), keys_.end());
  std::sort(sorted.begin(), sorted.end());
  out.set_retired_below(retired_below_);
  out.set_applied_steps(applied_steps_);
  out.set_duplicate_steps(duplicate_steps_);
  out.mutable_closure_ids()->Reserve(static_cast<int>(sorted.size()));
  out.mutable_steps()->Reserve(static_cast<int>(sorted.size()));
  for (const auto& [closure, step] : sorted) {
    out.add_closure_ids(closure);
    out.add_steps(step);
  }
  return out;
}

void AppliedUpdateLedger::Replace(State state) {
  absl::MutexLock lock(&mu_);
  keys_.swap(state.keys);
  retired_below_ = state.retired_below;
  applied_steps_ = state.applied_steps;
  duplicate_steps_ = state.duplicate_steps;
  // The old keys are freed with `state`, after the lock is released.
}

absl::Status SavedLedgers::Add(int ps_index, const AppliedKeys& record) {
  if (record.closure_ids_size() != record.steps_size()) {
    return absl::InvalidArgumentError("closure_ids and steps differ in length");
  }
  for (int i = 0; i < record.steps_size(); ++i) {
    merged_.keys.emplace(record.closure_ids(i), record.steps(i));
  }
  merged_.retired_below = std::max(merged_.retired_below, record.retired_below());
  counters_by_ps_[ps_index] = {record.applied_steps(), record.duplicate_steps()};
  return absl::OkStatus();
}

AppliedUpdateLedger::State SavedLedgers::Merged(int ps_index) && {
  AppliedUpdateLedger::State out = std::move(merged_);
  std::pair<int64_t, int64_t> counters{0, 0};
  if (auto it = counters_by_ps_.find(ps_index); it != counters_by_ps_.end()) {
    counters = it->second;
  } else {
    for (const auto& [ps, c] : counters_by_ps_) {
      counters.first = std::max(counters.first, c.first);
      counters.second = std::max(counters.second, c.second);
    }
  }
  out.applied_steps = counters.first;
  out.duplicate_steps = counters.second;
  return out;
}

}  // namespace pscluster
