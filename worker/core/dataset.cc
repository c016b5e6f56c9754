#include "worker/core/dataset.h"

#include <algorithm>
#include <numeric>
#include <random>

#include "absl/strings/str_cat.h"
#include "common/idx_reader.h"
#include "common/status_macros.h"
#include "worker/core/csv_dataset.h"
#include "worker/core/synthetic_ctr.h"

namespace pscluster {

absl::StatusOr<Dataset> LoadDataset(const DataSourceSpec& source, const ModelSpec& model) {
  if (source.stream.enabled) {
    // Never loaded whole: closures read their units (stream_batches.h).
    return absl::FailedPreconditionError(absl::StrCat(
        "a streaming ", source.format, " source is read closure by closure, not loaded"));
  }
  if (source.format == "csv") return LoadCsvDataset(source, model);
  if (source.format == "synthetic_ctr") return LoadSyntheticCtr(source, model);
  if (source.format != "idx") {
    return absl::InvalidArgumentError(absl::StrCat("unknown data format '", source.format,
                                                   "' (expected idx, csv or synthetic_ctr)"));
  }
  ASSIGN_OR_RETURN(IdxImages images, ReadIdxImages(source.images, source.limit));
  // Unlabelled rows (to predict): every label 0.
  std::vector<uint8_t> labels(source.labelled ? 0 : images.count, 0);
  if (source.labelled) {
    ASSIGN_OR_RETURN(labels, ReadIdxLabels(source.labels, source.limit));
  }
  if (static_cast<int64_t>(labels.size()) != images.count) {
    return absl::InvalidArgumentError(absl::StrCat("'", source.images, "' has ", images.count,
                                                   " images but '", source.labels, "' has ",
                                                   labels.size(), " labels"));
  }
  Dataset d;
  d.count = images.count;
  d.features = images.rows * images.cols;
  d.x.resize(images.pixels.size());
  for (size_t i = 0; i < images.pixels.size(); ++i) d.x[i] = images.pixels[i] * (1.0f / 255.0f);
  d.y.assign(labels.begin(), labels.end());
  for (int32_t label : d.y) d.num_classes = std::max<int64_t>(d.num_classes, label + 1);
  return d;
}

std::vector<int64_t> EpochPermutation(int64_t size, uint64_t seed, int64_t epoch, bool shuffle) {
  std::vector<int64_t> order(size);
  std::iota(order.begin(), order.end(), 0);
  if (shuffle) {
    std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(epoch) + 1);
    // Fisher-Yates written out: std::shuffle's draw sequence is not specified
    // by the standard, and every worker must agree on the order.
    for (int64_t i = size - 1; i > 0; --i) {
      const int64_t j = static_cast<int64_t>(rng() % static_cast<uint64_t>(i + 1));
      std::swap(order[i], order[j]);
    }
  }
  return order;
}

}  // namespace pscluster
