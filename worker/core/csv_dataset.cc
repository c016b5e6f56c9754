#include "worker/core/csv_dataset.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/csv_reader.h"
#include "common/status_macros.h"
#include "worker/core/features.h"
#include "worker/core/row_encoder.h"

namespace pscluster {

absl::StatusOr<Dataset> LoadCsvDataset(const DataSourceSpec& source, const ModelSpec& model,
                                       CsvLoadStats* stats) {
  CsvLoadStats local;
  if (stats == nullptr) stats = &local;
  *stats = CsvLoadStats();
  CsvOptions options;
  options.delimiter = source.delimiter;
  options.header = source.header;
  // Every file of the source, read in order as one data set.
  const std::vector<std::string> files =
      source.paths.empty() ? std::vector<std::string>{source.path} : source.paths;
  ASSIGN_OR_RETURN(std::unique_ptr<CsvReader> csv,
                   CsvReader::Open(files[0], source.columns, options));
  ASSIGN_OR_RETURN(const RowEncoder encoder, RowEncoder::Create(source, model, csv->path()));
  size_t file = 0;
  int64_t row_offset = 0;  // data rows of the files before this one
  Dataset d = encoder.Empty();
  while (source.limit <= 0 || d.count < source.limit) {
    ASSIGN_OR_RETURN(bool got, csv->Next());
    if (!got) {
      if (++file == files.size()) break;
      row_offset = stats->rows_read;
      // Closed before the next one opens: one open file at a time.
      csv.reset();
      ASSIGN_OR_RETURN(csv, CsvReader::Open(files[file], source.columns, options));
      continue;
    }
    ++stats->rows_read;
    if (source.holdout_fraction > 0 &&
        InHoldout(row_offset + csv->row(), source.holdout_fraction, source.holdout_seed) !=
            source.holdout_part) {
      ++stats->other_split_part;
      continue;
    }
    absl::StatusOr<bool> added = encoder.Append(csv->fields(), &d);
    if (!added.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(csv->Where(), added.status().message()));
    }
    if (!*added) ++stats->missing_label;
  }
  return d;
}

}  // namespace pscluster
