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
  int64_t num_elements() const { return static_cast<int64_t>(bytes_.size() / sizeof(float)); }
  int64_t num_bytes() const { return static_cast<int64_t>(bytes_.size()); }
  float* data() { return reinterpret_cast<float*>(bytes_.data()); }
  const float* data() const { return reinterpret_cast<const float*>(bytes_.data()); }
  absl::Span<float> values() { return absl::MakeSpan(data(), num_elements()); }
  absl::Span<const float> values() const { return absl::MakeConstSpan(data(), num_elements()); }
  // A copy of the elements.
  std::vector<float> ToVector() const {
    return std::vector<float>(values().begin(), values().end());
  }

  // Exchanges this tensor's element bytes with `bytes` (a TensorProto's
  // `data`), copying nothing: a pulled tensor becomes the model's, or a
  // gradient goes into a request, and the proto keeps the other buffer for
  // the next call. REQUIRES: once the caller is done swapping, the tensor
  // holds NumElements(shape()) * 4 bytes again.
  void SwapBytes(std::string* bytes) { bytes_.swap(*bytes); }

 private:
  Shape shape_;
  // Little-endian float32 elements. A std::string (heap blocks are 16-byte
  // aligned) so that SwapBytes can trade it with a protobuf `bytes` field.
  std::string bytes_;
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
