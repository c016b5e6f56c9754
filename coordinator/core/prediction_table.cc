#include "coordinator/core/prediction_table.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace pscluster {

PredictionTable::PredictionTable(int64_t rows, int64_t split_rows)
    : rows_(std::max<int64_t>(rows, 0)),
      split_rows_(std::max<int64_t>(split_rows, 1)),
      num_splits_((rows_ + split_rows_ - 1) / split_rows_) {
  absl::MutexLock lock(&mu_);
  splits_.resize(num_splits_);
  answered_.assign(num_splits_, false);
}

int64_t PredictionTable::SplitEnd(int64_t split) const {
  return std::min(rows_, (split + 1) * split_rows_);
}

absl::StatusOr<bool> PredictionTable::Record(int64_t first_row, int64_t rows, int64_t outputs,
                                             std::vector<float> values) {
  if (first_row < 0 || first_row >= rows_ || first_row % split_rows_ != 0) {
    return absl::InvalidArgumentError(absl::StrCat("an answer for row ", first_row,
                                                   ", which starts no split of ", split_rows_,
                                                   " rows over ", rows_, " rows"));
  }
  const int64_t split = first_row / split_rows_;
  const std::string where = absl::StrCat("the answer for rows [", first_row, ", ", SplitEnd(split), ")");
  if (rows != SplitEnd(split) - first_row) {
    return absl::InvalidArgumentError(absl::StrCat(where, " holds ", rows, " rows"));
  }
  if (outputs < 1 || static_cast<int64_t>(values.size()) != rows * outputs) {
    return absl::InvalidArgumentError(absl::StrCat(where, " holds ", values.size(),
                                                   " values, not ", rows, " rows x ", outputs,
                                                   " outputs"));
  }
  absl::MutexLock lock(&mu_);
  if (outputs_ != 0 && outputs != outputs_) {
    return absl::InvalidArgumentError(absl::StrCat(where, " has ", outputs,
                                                   " outputs per row, earlier ones ", outputs_));
  }
  if (answered_[split]) {
    ++duplicates_;
    return false;
  }
  outputs_ = outputs;
  answered_[split] = true;
  splits_[split] = std::move(values);
  ++splits_done_;
  rows_done_ += rows;
  return true;
}

std::vector<PredictionTable::Split> PredictionTable::TakeReady() {
  std::vector<Split> ready;
  absl::MutexLock lock(&mu_);
  for (; next_to_take_ < num_splits_ && answered_[next_to_take_]; ++next_to_take_) {
    Split s;
    s.first_row = SplitBegin(next_to_take_);
    s.rows = SplitEnd(next_to_take_) - s.first_row;
    s.values = std::move(splits_[next_to_take_]);
    splits_[next_to_take_] = std::vector<float>();  // its memory goes with it
    rows_taken_ += s.rows;
    ready.push_back(std::move(s));
  }
  return ready;
}

int64_t PredictionTable::splits_done() const {
  absl::MutexLock lock(&mu_);
  return splits_done_;
}

int64_t PredictionTable::duplicates() const {
  absl::MutexLock lock(&mu_);
  return duplicates_;
}

int64_t PredictionTable::rows_done() const {
  absl::MutexLock lock(&mu_);
  return rows_done_;
}

int64_t PredictionTable::rows_taken() const {
  absl::MutexLock lock(&mu_);
  return rows_taken_;
}

int64_t PredictionTable::outputs() const {
  absl::MutexLock lock(&mu_);
  return outputs_;
}

absl::Status PredictionTable::Verify() const {
  absl::MutexLock lock(&mu_);
  // Counted two ways: the rows Record() counted, and the answered splits'
  // own sizes.
  int64_t rows = 0;
  int64_t first_missing = -1;
  for (int64_t s = 0; s < num_splits_; ++s) {
    if (answered_[s]) {
      rows += SplitEnd(s) - SplitBegin(s);
    } else if (first_missing < 0) {
      first_missing = s;
    }
  }
  if (first_missing < 0 && rows == rows_ && rows_done_ == rows_) return absl::OkStatus();
  std::string where;
  if (first_missing >= 0) {
    where = absl::StrCat("; the first missing rows are [", SplitBegin(first_missing), ", ",
                         SplitEnd(first_missing), ")");
  }
  return absl::InternalError(absl::StrCat("batch prediction is incomplete: ", rows, " of ", rows_,
                                          " rows have a prediction (", rows_ - rows, " missing)",
                                          where));
}

}  // namespace pscluster
