// `psctl describe`: how a job's variables are laid out over the PS tasks —
// each variable's logical shape, the partitioner's decision, which PS holds
// which rows, and the parameter and slot bytes each PS holds — as a text
// report. Pure functions; thread-safe.
#ifndef PSCLUSTER_CLIENT_DESCRIBE_H_
#define PSCLUSTER_CLIENT_DESCRIBE_H_

#include <string>

#include "protos/coordinator.pb.h"

namespace pscluster {

// "1.5 MiB", "512 B".
std::string FormatBytes(int64_t bytes);

// A table of variables and shards, then one line per PS with its totals.
std::string FormatDescribe(const DescribeJobResponse& describe);

}  // namespace pscluster

#endif  // PSCLUSTER_CLIENT_DESCRIBE_H_
