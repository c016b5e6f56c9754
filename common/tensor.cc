#include "common/tensor.h"

#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace pscluster {

static_assert(sizeof(float) == 4, "float32 is 4 bytes");

int64_t NumElements(absl::Span<const int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string ShapeString(absl::Span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

absl::Status ValidateShape(absl::Span<const int64_t> shape, int64_t max_elements) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("shape ", ShapeString(shape), " has a negative dimension"));
    }
    if (d != 0 && n > max_elements / d) {
      return absl::InvalidArgumentError(absl::StrCat("shape ", ShapeString(shape),
                                                     " has more than ", max_elements,
                                                     " elements"));
    }
    n *= d;
  }
  return absl::OkStatus();
}

Tensor::Tensor(Shape shape)
    : shape_(std::move(shape)), bytes_(NumElements(shape_) * sizeof(float), '\0') {}

Tensor::Tensor(Shape shape, std::vector<float> values)
    : shape_(std::move(shape)),
      bytes_(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float)) {}

void EncodeTensor(absl::Span<const int64_t> shape, absl::Span<const float> values,
                  TensorProto* out) {
  out->set_dtype(DT_FLOAT32);
  out->mutable_shape()->Assign(shape.begin(), shape.end());
  out->mutable_data()->assign(reinterpret_cast<const char*>(values.data()),
                              values.size() * sizeof(float));
}

namespace {

absl::Status CheckPayload(const TensorProto& proto, const std::string& what) {
  if (proto.dtype() != DT_FLOAT32) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": dtype ", DType_Name(proto.dtype()), " is not supported (expected DT_FLOAT32)"));
  }
  Shape shape(proto.shape().begin(), proto.shape().end());
  if (absl::Status s = ValidateShape(shape, std::numeric_limits<int64_t>::max() / 4); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", s.message()));
  }
  const int64_t want = NumElements(shape) * static_cast<int64_t>(sizeof(float));
  if (static_cast<int64_t>(proto.data().size()) != want) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": shape ", ShapeString(shape),
                                                   " needs ", want, " bytes but ",
                                                   proto.data().size(), " were sent"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Tensor> DecodeTensor(const TensorProto& proto) {
  if (absl::Status s = CheckPayload(proto, "tensor"); !s.ok()) return s;
  Tensor t(Shape(proto.shape().begin(), proto.shape().end()));
  if (t.num_bytes() > 0) std::memcpy(t.data(), proto.data().data(), proto.data().size());
  return t;
}

absl::StatusOr<absl::Span<const float>> TensorView(const TensorProto& proto,
                                                   absl::Span<const int64_t> expected_shape,
                                                   const std::string& what) {
  if (absl::Status s = CheckPayload(proto, what); !s.ok()) return s;
  if (!std::equal(proto.shape().begin(), proto.shape().end(), expected_shape.begin(),
                  expected_shape.end())) {
    Shape got(proto.shape().begin(), proto.shape().end());
    return absl::InvalidArgumentError(absl::StrCat(what, ": shape ", ShapeString(got),
                                                   " does not match ",
                                                   ShapeString(expected_shape)));
  }
  // The bytes of a std::string are suitably aligned for float (operator new).
  return absl::Span<const float>(reinterpret_cast<const float*>(proto.data().data()),
                                 proto.data().size() / sizeof(float));
}

}  // namespace pscluster
