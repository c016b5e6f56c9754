#include "worker/core/row_encoder.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"

namespace pscluster {
namespace {

int ColumnIndex(const std::vector<ColumnSpec>& columns, const std::string& name) {
  for (size_t i = 0; i < columns.size(); ++i) {
    if (columns[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

double Number(const CsvField& f, ColumnSpec::Type type) {
  return type == ColumnSpec::Type::kInt ? static_cast<double>(f.int_value) : f.float_value;
}

}  // namespace

absl::StatusOr<RowEncoder> RowEncoder::Create(const DataSourceSpec& source,
                                              const ModelSpec& model, const std::string& where) {
  RowEncoder e;
  e.columns_ = source.columns;
  e.has_threshold_ = source.has_label_threshold;
  e.threshold_ = source.label_threshold;
  e.label_name_ = source.label_column;
  auto column = [&](const std::string& name, const std::string& role) -> absl::StatusOr<int> {
    const int i = ColumnIndex(e.columns_, name);
    if (i < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": ", role, " reads column '", name, "', which the data source does not declare"));
    }
    return i;
  };
  // Unlabelled rows (to predict) have no label column: every label is 0.
  if (source.labelled) {
    absl::StatusOr<int> i = column(source.label_column, "the label");
    if (!i.ok()) return i.status();
    if (e.columns_[*i].type == ColumnSpec::Type::kString) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": the label column '",
                                                     source.label_column, "' must be int or float"));
    }
    e.label_column_ = *i;
  }
  for (size_t k = 0; k < source.dense_columns.size(); ++k) {
    const std::string& name = source.dense_columns[k];
    e.log1p_.push_back(k < source.dense_transforms.size() &&
                       source.dense_transforms[k] == DataSourceSpec::DenseTransform::kLog1p);
    absl::StatusOr<int> i = column(name, "a dense input");
    if (!i.ok()) return i.status();
    if (e.columns_[*i].type == ColumnSpec::Type::kString) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": dense column '", name, "' must be int or float"));
    }
    e.dense_.push_back(*i);
  }
  for (const CategoricalFeatureSpec& f : model.categorical) {
    std::vector<int> columns;
    // ParseJobSpec fills `column` in; a spec built in code may leave it empty.
    const std::vector<std::string> names =
        f.cross.empty() ? std::vector<std::string>{f.column.empty() ? f.name : f.column} : f.cross;
    for (const std::string& name : names) {
      absl::StatusOr<int> i = column(name, absl::StrCat("feature '", f.name, "'"));
      if (!i.ok()) return i.status();
      columns.push_back(*i);
    }
    e.encoders_.emplace_back(f);
    e.feature_columns_.push_back(std::move(columns));
  }
  return e;
}

Dataset RowEncoder::Empty() const {
  Dataset d;
  d.features = static_cast<int64_t>(dense_.size());
  d.categorical.resize(encoders_.size());
  for (CategoricalColumn& c : d.categorical) c.offsets.push_back(0);
  if (has_threshold_) d.num_classes = 2;
  return d;
}

absl::StatusOr<bool> RowEncoder::Append(const std::vector<CsvField>& fields, Dataset* d) const {
  int32_t label = 0;
  if (label_column_ >= 0) {
    const CsvField& f = fields[label_column_];
    if (f.missing) return false;
    const double v = Number(f, columns_[label_column_].type);
    if (has_threshold_) {
      label = v >= threshold_ ? 1 : 0;
    } else if (!(v >= 0 && v <= std::numeric_limits<int32_t>::max()) || v != std::floor(v)) {
      return absl::InvalidArgumentError(
          absl::StrCat("label column '", label_name_, "': expected a class index (0, 1, ...)"));
    } else {
      label = static_cast<int32_t>(v);
    }
  }
  // Ids first: a row refused for an id leaves `d` as it was.
  const size_t features = encoders_.size();
  std::vector<size_t> id_sizes(features);
  for (size_t k = 0; k < features; ++k) id_sizes[k] = d->categorical[k].ids.size();
  auto undo = [&] {
    for (size_t k = 0; k < features; ++k) d->categorical[k].ids.resize(id_sizes[k]);
  };
  std::vector<CategoricalEncoder::CrossValue> cross;
  for (size_t k = 0; k < features; ++k) {
    std::vector<uint64_t>* ids = &d->categorical[k].ids;
    absl::Status s;
    if (!encoders_[k].spec().cross.empty()) {
      // A missing value in any crossed column gives no id.
      cross.clear();
      for (int i : feature_columns_[k]) {
        const CsvField& f = fields[i];
        if (f.missing) break;
        CategoricalEncoder::CrossValue v;
        v.type = columns_[i].type;
        v.int_value = f.int_value;
        v.float_value = f.float_value;
        v.text = f.text;
        cross.push_back(v);
      }
      if (cross.size() == feature_columns_[k].size()) s = encoders_[k].AddCross(cross, ids);
    } else {
      const int i = feature_columns_[k][0];
      const CsvField& f = fields[i];
      if (!f.missing) {
        switch (columns_[i].type) {
          case ColumnSpec::Type::kInt:
            s = encoders_[k].AddInt(f.int_value, ids);
            break;
          case ColumnSpec::Type::kFloat:
            s = encoders_[k].AddFloat(f.float_value, ids);
            break;
          case ColumnSpec::Type::kString:
            encoders_[k].AddString(f.text, ids);
            break;
        }
      }
    }
    if (!s.ok()) {
      undo();
      return s;
    }
  }
  for (size_t k = 0; k < features; ++k) {
    d->categorical[k].offsets.push_back(static_cast<int64_t>(d->categorical[k].ids.size()));
  }
  d->y.push_back(label);
  d->num_classes = std::max<int64_t>(d->num_classes, int64_t{label} + 1);
  for (size_t k = 0; k < dense_.size(); ++k) {
    const CsvField& f = fields[dense_[k]];
    double v = f.missing ? 0.0 : Number(f, columns_[dense_[k]].type);
    if (log1p_[k]) v = std::log1p(std::max(v, 0.0));
    d->x.push_back(static_cast<float>(v));
  }
  ++d->count;
  return true;
}

}  // namespace pscluster
