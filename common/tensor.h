// Tensor: a dense float32 array with a shape, and its wire encoding.
//
// On the wire a tensor is a TensorProto: dtype, shape and raw little-endian
// bytes. Decoding checks dtype and byte count, so a malformed tensor from a
// peer becomes INVALID_ARGUMENT rather than an out-of-bounds read.
//
// Tensor is a value type; it is not thread-safe to mutate concurrently.
#ifndef PSCLUSTER_COMMON_TENSOR_H_
#define PSCLUSTER_COMMON_TENSOR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "protos/tensor.pb.h"

namespace pscluster {

using Shape = std::vector<int64_t>;

// Number of elements of `shape`; 1 for a scalar (empty shape).
int64_t NumElements(absl::Span<const int64_t> shape);

// "[784, 256]".
std::string ShapeString(absl::Span<const int64_t> shape);

// Returns INVALID_ARGUMENT if a dimension is negative or the element count
// overflows `max_elements`.
absl::Status ValidateShape(absl::Span<const int64_t> shape, int64_t max_elements);

class Tensor {
 public:
  Tensor() = default;
  // A zero-filled tensor of `shape`. REQUIRES: ValidateShape(shape) is OK.
  explicit Tensor(Shape shape);
  Tensor(Shape shape, std::vector<float> values);

  const Shape& shape() const { return shape_; }
  int64_t num_elements() const { return static_cast<int64_t>(values_.size()); }
  int64_t num_bytes() const { return num_elements() * sizeof(float); }
  float* data() { return values_.data(); }
  const float* data() const { return values_.data(); }
  std::vector<float>& values() { return values_; }
  const std::vector<float>& values() const { return values_; }

 private:
  Shape shape_;
  std::vector<float> values_;
};

// Writes dtype, shape and the raw bytes of `values` into `out`.
void EncodeTensor(absl::Span<const int64_t> shape, absl::Span<const float> values,
                  TensorProto* out);
inline void EncodeTensor(const Tensor& t, TensorProto* out) {
  EncodeTensor(t.shape(), t.values(), out);
}

// Decodes `proto`. INVALID_ARGUMENT if its dtype is not float32, a dimension
// is negative, or the byte count does not match the shape.
absl::StatusOr<Tensor> DecodeTensor(const TensorProto& proto);

// Checks that `proto` is float32 with exactly `expected_shape`, naming
// `what` in the error; returns a view of its elements. The view aliases
// proto.data() and lives as long as `proto` does.
absl::StatusOr<absl::Span<const float>> TensorView(const TensorProto& proto,
                                                   absl::Span<const int64_t> expected_shape,
                                                   const std::string& what);

}  // namespace pscluster

#endif  // PSCLUSTER_COMMON_TENSOR_H_
