// PredictionTable: the results of a batch prediction (`psctl predict`),
// kept exactly once per row and handed out in input order.
//
// The rows [0, rows) are cut into splits of `split_rows` rows (the last one
// shorter), one PREDICT closure each. Record() takes a closure's answer: the
// first answer of a split is kept, a second one (a retried closure whose
// first run did answer after all, or a closure run twice) is dropped and
// counted. TakeReady() hands out, in input order, the answered splits that
// follow those already taken (their values leave the table, so that rows
// already streamed to the caller are not held twice); a split's later
// duplicate is still recognised. Verify() checks at the end that every row
// has exactly one prediction.
//
// Thread-safe: the dispatch threads Record() concurrently. TakeReady() is
// atomic, but callers that pass its splits on must serialize their own
// TakeReady-and-send to keep the order.
#ifndef PSCLUSTER_COORDINATOR_CORE_PREDICTION_TABLE_H_
#define PSCLUSTER_COORDINATOR_CORE_PREDICTION_TABLE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace pscluster {

class PredictionTable {
 public:
  // One split's predictions: `rows` x outputs() floats, row-major.
  struct Split {
    int64_t first_row = 0;
    int64_t rows = 0;
    std::vector<float> values;
  };

  // REQUIRES: rows >= 0, split_rows >= 1.
  PredictionTable(int64_t rows, int64_t split_rows);

  int64_t rows() const { return rows_; }
  int64_t split_rows() const { return split_rows_; }
  int64_t num_splits() const { return num_splits_; }
  // The rows [begin, end) of split `split`. REQUIRES: 0 <= split < num_splits().
  int64_t SplitBegin(int64_t split) const { return split * split_rows_; }
  int64_t SplitEnd(int64_t split) const;

  // Records the answer for the split that starts at `first_row`: `values`
  // holds `rows` x `outputs` floats, row-major. Returns true when it was
  // kept, false for a duplicate (the split already has its answer, taken or
  // not; the values are dropped and counted). INVALID_ARGUMENT, with nothing
  // recorded, when `first_row` starts no split, `rows` is not that split's
  // size, values.size() != rows * outputs, `outputs` < 1, or `outputs`
  // differs from that of the answers before.
  absl::StatusOr<bool> Record(int64_t first_row, int64_t rows, int64_t outputs,
                              std::vector<float> values) ABSL_LOCKS_EXCLUDED(mu_);

  // The answered splits after those taken before, in input order, up to the
  // first split not answered yet (none when that is the next one). Their
  // values move out of the table.
  std::vector<Split> TakeReady() ABSL_LOCKS_EXCLUDED(mu_);

  // Splits answered (once each), duplicates dropped, rows answered, rows
  // taken.
  int64_t splits_done() const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t duplicates() const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t rows_done() const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t rows_taken() const ABSL_LOCKS_EXCLUDED(mu_);
  // Outputs per row (0 before the first answer).
  int64_t outputs() const ABSL_LOCKS_EXCLUDED(mu_);

  // OK when every row [0, rows) holds exactly one prediction (taken or
  // not); INTERNAL otherwise, saying how many rows are missing and naming
  // the first missing split's rows.
  absl::Status Verify() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const int64_t rows_;
  const int64_t split_rows_;
  const int64_t num_splits_;
  mutable absl::Mutex mu_;
  // Per split: its values (empty until answered, and again once taken) and
  // whether it was answered.
  std::vector<std::vector<float>> splits_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> answered_ ABSL_GUARDED_BY(mu_);
  int64_t next_to_take_ ABSL_GUARDED_BY(mu_) = 0;  // a split index
  int64_t splits_done_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t rows_done_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t rows_taken_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t duplicates_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t outputs_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace pscluster

#endif  // PSCLUSTER_COORDINATOR_CORE_PREDICTION_TABLE_H_
