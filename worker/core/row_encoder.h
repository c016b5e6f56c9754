// RowEncoder: one data row (typed fields by column, common/csv_reader.h)
// into one example of a Dataset: the label, the dense columns through their
// transforms and the model's categorical features through their
// CategoricalEncoders (features.h). The one conversion of rows to examples,
// shared by the in-memory csv loader (csv_dataset.h) and streaming input
// (stream_batches.h).
//
// Thread-safety: immutable after Create; safe to share across threads.
#ifndef PSCLUSTER_WORKER_CORE_ROW_ENCODER_H_
#define PSCLUSTER_WORKER_CORE_ROW_ENCODER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/csv_reader.h"
#include "common/job_spec.h"
#include "worker/core/dataset.h"
#include "worker/core/features.h"

namespace pscluster {

class RowEncoder {
 public:
  // Resolves the label, dense and feature columns of `source` (by name,
  // among source.columns, whose order the fields follow) for `model`.
  // INVALID_ARGUMENT "WHERE: the label reads column 'x', which the data
  // source does not declare", or a string label / dense column.
  static absl::StatusOr<RowEncoder> Create(const DataSourceSpec& source, const ModelSpec& model,
                                           const std::string& where);

  // An empty Dataset with this encoder's shape (features, categorical
  // columns with offsets {0}).
  Dataset Empty() const;

  // Appends the row `fields` (one per source column) to `d` (shaped by
  // Empty). false, leaving `d` alone, for a row without a label (a missing
  // value in the label column of a labelled source). INVALID_ARGUMENT,
  // without a place (the caller adds it), for a label that is not a class
  // index or an id outside a fixed vocabulary. d->num_classes grows to
  // 1 + the largest label (at least 2 with a threshold).
  absl::StatusOr<bool> Append(const std::vector<CsvField>& fields, Dataset* d) const;

 private:
  RowEncoder() = default;

  bool has_threshold_ = false;
  double threshold_ = 0;
  std::string label_name_;
  int label_column_ = -1;  // -1: unlabelled, every label 0
  std::vector<ColumnSpec> columns_;
  std::vector<int> dense_;
  std::vector<bool> log1p_;
  std::vector<CategoricalEncoder> encoders_;
  // Per feature: its column, or its crossed columns.
  std::vector<std::vector<int>> feature_columns_;
};

}  // namespace pscluster

#endif  // PSCLUSTER_WORKER_CORE_ROW_ENCODER_H_
