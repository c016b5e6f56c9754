// The variables a job's model needs, and where they are placed.
//
// Both the coordinator (which creates them on the PS tasks) and the worker
// (which pulls them by name) derive them from the job spec through this one
// function, so the two always agree on names and shapes.
#ifndef PSCLUSTER_COMMON_MODEL_VARIABLES_H_
#define PSCLUSTER_COMMON_MODEL_VARIABLES_H_

#include <string>
#include <vector>

#include "common/job_spec.h"
#include "protos/ps.pb.h"

namespace pscluster {

// Dense layer i owns "dense_<i>/kernel" [fan_in, units] and "dense_<i>/bias"
// [units]; each carries the job's initializer and optimizer.
std::vector<VariableSpecProto> ModelVariables(const JobSpec& spec);

// Places variables on `num_ps` tasks round-robin in creation order, as TF's
// ParameterServerStrategy does without a partitioner. Returns one PS index
// per variable. REQUIRES: num_ps >= 1.
std::vector<int> RoundRobinPlacement(size_t num_variables, int num_ps);

}  // namespace pscluster

#endif  // PSCLUSTER_COMMON_MODEL_VARIABLES_H_
