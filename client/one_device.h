// `psctl local` for `strategy: one_device`: trains the job in this process on
// one device (CPU or one GPU), with no servers and no RPC, so the same job
// YAML runs on one machine and on a cluster by changing one field.
//
// The implementation (one_device.cc, target //client:one_device) belongs to
// the lead; psctl calls it from RunLocal in psctl_main.cc.
#ifndef PSCLUSTER_CLIENT_ONE_DEVICE_H_
#define PSCLUSTER_CLIENT_ONE_DEVICE_H_

#include "client/local_run_options.h"
#include "common/job_spec.h"

namespace pscluster {

// Trains `spec` to the end, rendering progress and the result as `options`
// says (same output contract as the parameter-server path: text progress and
// summary, or exactly one JSON object from result_json.h with strategy
// "one_device" and no "pids"). Returns psctl's exit code: 0 when training
// succeeded, 1 when it failed, 2 for bad input, 130 when interrupted.
// REQUIRES: spec.strategy == Strategy::kOneDevice; the data files exist.
int RunOneDevice(const JobSpec& spec, const LocalRunOptions& options);

}  // namespace pscluster

#endif  // PSCLUSTER_CLIENT_ONE_DEVICE_H_
