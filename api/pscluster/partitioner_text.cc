// ParsePartitioner (declared in cluster_coordinator.h): the text form of a
// variable partitioner that the C++ and Python APIs and the examples' flags
// take, parsed into the PartitionerSpec of common/partitioner.h.
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "api/pscluster/cluster_coordinator.h"

namespace pscluster {

absl::StatusOr<PartitionerSpec> ParsePartitioner(absl::string_view text) {
  const std::vector<std::string> parts = absl::StrSplit(text, ':');
  const std::string usage =
      "give none, fixed:SHARDS, min_size:BYTES[:MAX_SHARDS] or max_size:BYTES[:MAX_SHARDS]";
  std::vector<int64_t> numbers;
  for (size_t i = 1; i < parts.size(); ++i) {
    int64_t n = 0;
    if (!absl::SimpleAtoi(parts[i], &n)) {
      return absl::InvalidArgumentError(
          absl::StrCat("partitioner '", text, "': '", parts[i], "' is not a number; ", usage));
    }
    numbers.push_back(n);
  }
  PartitionerSpec spec;
  const std::string& kind = parts[0];
  if (kind == "none" && numbers.empty()) {
    return spec;
  } else if (kind == "fixed" && numbers.size() == 1) {
    spec = PartitionerSpec::Fixed(numbers[0]);
  } else if (kind == "min_size" && (numbers.size() == 1 || numbers.size() == 2)) {
    spec = PartitionerSpec::MinSize(numbers[0], numbers.size() == 2 ? numbers[1] : 1);
  } else if (kind == "max_size" && (numbers.size() == 1 || numbers.size() == 2)) {
    spec = PartitionerSpec::MaxSize(numbers[0], numbers.size() == 2 ? numbers[1] : 0);
  } else if (kind == "none" || kind == "fixed" || kind == "min_size" || kind == "max_size") {
    return absl::InvalidArgumentError(
        absl::StrCat("partitioner '", text, "': wrong number of values; ", usage));
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown partitioner '", kind, "' in '", text, "': ", usage));
  }
  if (absl::Status s = ValidatePartitioner(spec); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("partitioner '", text, "': ", s.message()));
  }
  return spec;
}

}  // namespace pscluster
