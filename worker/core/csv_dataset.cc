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

namespace pscluster {
namespace {

absl::StatusOr<int> Column(const CsvReader& csv, const std::string& name, const std::string& role) {
  const int i = csv.ColumnIndex(name);
  if (i < 0) {
    return absl::InvalidArgumentError(absl::StrCat(csv.path(), ": ", role, " reads column '", name,
                                                   "', which the data source does not declare"));
  }
  return i;
}

double Number(const CsvField& f, ColumnSpec::Type type) {
  return type == ColumnSpec::Type::kInt ? static_cast<double>(f.int_value) : f.float_value;
}

absl::StatusOr<int32_t> Label(const CsvReader& csv, int column, const DataSourceSpec& source) {
  const CsvField& f = csv.field(column);
  const double v = Number(f, csv.columns()[column].type);
  if (source.has_label_threshold) return v >= source.label_threshold ? 1 : 0;
  if (!(v >= 0 && v <= std::numeric_limits<int32_t>::max()) || v != std::floor(v)) {
    return absl::InvalidArgumentError(absl::StrCat(csv.Where(), "label column '", source.label_column,
                                                   "': expected a class index (0, 1, ...)"));
  }
  return static_cast<int32_t>(v);
}

}  // namespace

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
  size_t file = 0;
  int64_t row_offset = 0;  // data rows of the files before this one

  // Unlabelled rows (to predict) have no label column: every label is 0.
  int label_column = -1;
  if (source.labelled) {
    ASSIGN_OR_RETURN(label_column, Column(*csv, source.label_column, "the label"));
    if (source.columns[label_column].type == ColumnSpec::Type::kString) {
      return absl::InvalidArgumentError(absl::StrCat(source.path, ": the label column '",
                                                     source.label_column, "' must be int or float"));
    }
  }
  std::vector<int> dense;
  std::vector<bool> log1p;
  for (size_t k = 0; k < source.dense_columns.size(); ++k) {
    const std::string& name = source.dense_columns[k];
    log1p.push_back(k < source.dense_transforms.size() &&
                    source.dense_transforms[k] == DataSourceSpec::DenseTransform::kLog1p);
    ASSIGN_OR_RETURN(int i, Column(*csv, name, "a dense input"));
    if (source.columns[i].type == ColumnSpec::Type::kString) {
      return absl::InvalidArgumentError(
          absl::StrCat(source.path, ": dense column '", name, "' must be int or float"));
    }
    dense.push_back(i);
  }
  std::vector<CategoricalEncoder> encoders;
  // Per feature: its column, or its crossed columns.
  std::vector<std::vector<int>> feature_columns;
  for (const CategoricalFeatureSpec& f : model.categorical) {
    std::vector<int> columns;
    if (f.cross.empty()) {
      // ParseJobSpec fills `column` in; a spec built in code may leave it empty.
      const std::string& column = f.column.empty() ? f.name : f.column;
      ASSIGN_OR_RETURN(int i, Column(*csv, column, absl::StrCat("feature '", f.name, "'")));
      columns.push_back(i);
    } else {
      for (const std::string& column : f.cross) {
        ASSIGN_OR_RETURN(int i, Column(*csv, column, absl::StrCat("feature '", f.name, "'")));
        columns.push_back(i);
      }
    }
    encoders.emplace_back(f);
    feature_columns.push_back(std::move(columns));
  }
  std::vector<CategoricalEncoder::CrossValue> cross;

  Dataset d;
  d.features = static_cast<int64_t>(dense.size());
  d.categorical.resize(encoders.size());
  for (CategoricalColumn& c : d.categorical) c.offsets.push_back(0);
  int32_t max_label = -1;
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
    int32_t label = 0;
    if (label_column >= 0) {
      if (csv->field(label_column).missing) {
        ++stats->missing_label;
        continue;
      }
      ASSIGN_OR_RETURN(label, Label(*csv, label_column, source));
    }
    d.y.push_back(label);
    max_label = std::max(max_label, label);
    for (size_t k = 0; k < dense.size(); ++k) {
      const CsvField& f = csv->field(dense[k]);
      double v = f.missing ? 0.0 : Number(f, source.columns[dense[k]].type);
      if (log1p[k]) v = std::log1p(std::max(v, 0.0));
      d.x.push_back(static_cast<float>(v));
    }
    for (size_t k = 0; k < encoders.size(); ++k) {
      std::vector<uint64_t>* ids = &d.categorical[k].ids;
      if (!encoders[k].spec().cross.empty()) {
        // A missing value in any crossed column gives no id.
        cross.clear();
        for (int i : feature_columns[k]) {
          const CsvField& f = csv->field(i);
          if (f.missing) break;
          CategoricalEncoder::CrossValue v;
          v.type = source.columns[i].type;
          v.int_value = f.int_value;
          v.float_value = f.float_value;
          v.text = f.text;
          cross.push_back(v);
        }
        if (cross.size() == feature_columns[k].size()) {
          if (absl::Status s = encoders[k].AddCross(cross, ids); !s.ok()) {
            return absl::InvalidArgumentError(absl::StrCat(csv->Where(), s.message()));
          }
        }
        d.categorical[k].offsets.push_back(static_cast<int64_t>(ids->size()));
        continue;
      }
      const int i = feature_columns[k][0];
      const CsvField& f = csv->field(i);
      if (!f.missing) {
        absl::Status s;
        switch (source.columns[i].type) {
          case ColumnSpec::Type::kInt:
            s = encoders[k].AddInt(f.int_value, ids);
            break;
          case ColumnSpec::Type::kFloat:
            s = encoders[k].AddFloat(f.float_value, ids);
            break;
          case ColumnSpec::Type::kString:
            encoders[k].AddString(f.text, ids);
            break;
        }
        if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat(csv->Where(), s.message()));
      }
      d.categorical[k].offsets.push_back(static_cast<int64_t>(ids->size()));
    }
    ++d.count;
  }
  d.num_classes = max_label + 1;
  if (source.has_label_threshold) d.num_classes = std::max<int64_t>(d.num_classes, 2);
  return d;
}

}  // namespace pscluster
