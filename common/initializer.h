// Variable initializers, run where a variable lives (on its PS).
//
// Deterministic: the same InitializerProto, variable name and shape give the
// same values in any process, so a one-device run and a cluster run start from
// the same model.
#ifndef PSCLUSTER_COMMON_INITIALIZER_H_
#define PSCLUSTER_COMMON_INITIALIZER_H_

#include <string>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "protos/ps.pb.h"

namespace pscluster {

// Returns INVALID_ARGUMENT naming the problem if `init` is not a known
// initializer or its parameters are out of range.
absl::Status ValidateInitializer(const InitializerProto& init);

// Fills `out` (row-major, of logical `shape`) for the variable `name`.
// glorot_uniform uses fan_in = shape[0] and fan_out = shape[1] for rank 2
// (Keras' convention for a Dense kernel). REQUIRES: ValidateInitializer OK.
void RunInitializer(const InitializerProto& init, const std::string& name,
                    absl::Span<const int64_t> shape, absl::Span<float> out);

}  // namespace pscluster

#endif  // PSCLUSTER_COMMON_INITIALIZER_H_
