// Loads a csv data source (DataSourceSpec format "csv") into a Dataset.
//
// For each data row of the source's files (source.paths, or source.path
// alone), in order, numbered on across files:
//   1. the holdout split (when holdout_fraction > 0): the row is kept iff
//      InHoldout(row, holdout_fraction, holdout_seed) == holdout_part, so the
//      "train" and "holdout" sources of one file are disjoint and together
//      cover it;
//   2. a row whose label is missing (NA or empty) is skipped and counted
//      (an unlabelled source, without `label`, has no label column: every
//      row loads, with label 0);
//   3. `limit` (when > 0) stops reading after that many examples;
//   4. label: label_column >= label_threshold (0/1) when a threshold is set,
//      else the column's value as a class index (a whole number >= 0);
//      dense_columns become x (a missing value is 0), each through its
//      transform (log1p: log(1 + max(x, 0)));
//      each model.categorical feature reads its `column` (its name when
//      `column` is empty), or its `cross` columns, through a
//      CategoricalEncoder (features.h); a missing value (in any crossed
//      column) gives no id.
// The file is read as source.delimiter and source.header say, gzip or plain
// (CsvReader); an empty field is a missing value (Criteo's logs).
//
// Thread-safety: LoadCsvDataset is stateless and safe to call concurrently.
#ifndef PSCLUSTER_WORKER_CORE_CSV_DATASET_H_
#define PSCLUSTER_WORKER_CORE_CSV_DATASET_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "common/job_spec.h"
#include "worker/core/dataset.h"

namespace pscluster {

// What LoadCsvDataset saw, for callers that report it.
struct CsvLoadStats {
  int64_t rows_read = 0;          // data rows read from the file
  int64_t other_split_part = 0;   // rows that belong to the other part of the split
  int64_t missing_label = 0;      // rows skipped for a missing label
};

// Reads source.path, or every file of source.paths in order (REQUIRES:
// source.format == "csv"), for `model`.
// num_classes is 1 + the largest label, and at least 2 for a thresholded
// (binary) label. `stats` may be null.
// Returns:
//   NOT_FOUND         "cannot open data file 'PATH': <strerror>"
//   INVALID_ARGUMENT  "PATH:LINE: ..." for a malformed file, a header that
//                     does not match source.columns, a label that is not a
//                     class index, or an id outside a fixed vocabulary
//                     ("PATH:LINE: feature 'user': id 9001 outside its
//                     vocabulary [0, 672)"); or a label, dense or feature
//                     column that source.columns does not declare.
absl::StatusOr<Dataset> LoadCsvDataset(const DataSourceSpec& source, const ModelSpec& model,
                                       CsvLoadStats* stats = nullptr);

}  // namespace pscluster

#endif  // PSCLUSTER_WORKER_CORE_CSV_DATASET_H_
