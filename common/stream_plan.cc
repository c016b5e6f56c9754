#include "common/stream_plan.h"

#include <algorithm>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/record_index.h"
#include "common/status_macros.h"
#include "common/tfrecord.h"

namespace pscluster {

absl::StatusOr<StreamPlan> StreamPlan::Create(const DataSourceSpec& source, int64_t unit_records,
                                              int64_t batch) {
  const bool tfrecord = source.format == "tfrecord";
  const bool by_file = source.stream.shard == StreamSpec::Shard::kFile;
  const std::vector<std::string> patterns =
      source.paths.empty() ? std::vector<std::string>{source.path} : source.paths;
  ASSIGN_OR_RETURN(std::vector<std::string> files, ExpandDataGlobs(patterns));
  if (static_cast<int64_t>(files.size()) > JobLimits::kMaxDataFiles) {
    return absl::InvalidArgumentError(absl::StrCat("the data paths name ", files.size(),
                                                   " files, over the limit of ",
                                                   JobLimits::kMaxDataFiles));
  }
  StreamPlan plan;
  std::string described;
  for (size_t f = 0; f < files.size(); ++f) {
    // The offsets are kept only where units start (data); a file's units
    // then need one offset each.
    ASSIGN_OR_RETURN(RecordFileIndex index,
                     IndexRecordFile(files[f], tfrecord, !tfrecord && source.header,
                                     by_file ? int64_t{1} << 62 : unit_records));
    if (!index.tail.ok()) {
      if (!source.stream.skip_corrupt) return index.tail;
      plan.lost_tails_.push_back(absl::StrCat(index.tail.message(), " (the rest of the file is "
                                                                    "lost)"));
    }
    if (index.gzip && !by_file) {
      return absl::InvalidArgumentError(absl::StrCat(
          "data file ", files[f], " is gzip, which cannot seek to a record range: give "
          "stream.shard: file for gzip files (or decompress them)"));
    }
    absl::StrAppend(&described, files[f], "\n", index.bytes, "\n", index.records, "\n");
    const int64_t step = by_file ? std::max<int64_t>(index.records, 1) : unit_records;
    for (int64_t b = 0, k = 0; b < index.records; b += step, ++k) {
      Unit u;
      u.file = static_cast<int>(f);
      u.begin = b;
      u.end = std::min(index.records, b + step);
      u.offset = index.offsets[k];
      u.steps = (u.end - u.begin + batch - 1) / batch;
      plan.epoch_steps_ += u.steps;
      plan.units_.push_back(u);
    }
    plan.records_ += index.records;
  }
  plan.files_ = std::move(files);
  if (plan.records_ == 0) {
    return absl::InvalidArgumentError(absl::StrCat("the data files (", plan.files_.size(),
                                                   " of them) hold no record"));
  }
  plan.fingerprint_ = absl::StrFormat("files=%d records=%d crc32c=%08x", plan.files_.size(),
                                      plan.records_, Crc32c(described));
  return plan;
}

StreamPlan::Epoch StreamPlan::ForEpoch(int64_t epoch, uint64_t seed, bool shuffle) const {
  const int64_t n = units();
  Epoch e;
  e.split_indices.resize(n);
  for (int64_t i = 0; i < n; ++i) e.split_indices[i] = i;
  if (shuffle) {
    // Fisher-Yates written out (as EpochPermutation): std::shuffle's draws
    // are not specified, and a restarted coordinator must plan alike.
    std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(epoch) + 1);
    for (int64_t i = n - 1; i > 0; --i) {
      const int64_t j = static_cast<int64_t>(rng() % static_cast<uint64_t>(i + 1));
      std::swap(e.split_indices[i], e.split_indices[j]);
    }
  }
  int64_t first_step = 0;
  for (int64_t i : e.split_indices) {
    const Unit& u = units_[i];
    DataSplit s;
    s.set_epoch(epoch);
    s.set_path(files_[u.file]);
    s.set_begin(u.begin);
    s.set_end(u.end);
    s.set_byte_offset(u.offset);
    s.set_first_step(first_step);
    s.set_epoch_steps(epoch_steps_);
    first_step += u.steps;
    e.splits.push_back(std::move(s));
  }
  return e;
}

}  // namespace pscluster
