// Push validation: each kind of bad push is refused with a message naming
// the variable and the problem; a good one is resolved for the store.
#include "ps/core/push_validation.h"

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/row_ids.h"
#include "common/tensor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ps/core/variable_store_internal.h"

namespace pscluster {
namespace variable_store_internal {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string Message(const absl::Status& s) { return std::string(s.message()); }

NamedTensor Grad(const std::string& name, const Shape& shape, float value) {
  NamedTensor out;
  out.set_name(name);
  EncodeTensor(shape, std::vector<float>(NumElements(shape), value), out.mutable_tensor());
  return out;
}

SparseGradient Sparse(const std::string& name, std::vector<uint64_t> ids, int64_t dim,
                      float value = 1.0f) {
  SparseGradient out;
  out.set_name(name);
  out.set_ids(EncodeRowIds(ids));
  const Shape shape = {static_cast<int64_t>(ids.size()), dim};
  EncodeTensor(shape, std::vector<float>(NumElements(shape), value), out.mutable_rows());
  return out;
}

// Variables "w" (DENSE [2, 3]), "e" (DENSE [4, 2], rows), "b" (DENSE [3],
// no rows) and "t" (HASH_TABLE of dim 2), looked up as the store does. The
// checks read only specs and shapes, so no optimizer or table is built.
class PushValidationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Add("w", DENSE, {2, 3});
    Add("e", DENSE, {4, 2});
    Add("b", DENSE, {3});
    Add("t", HASH_TABLE, {2});
  }

  void Add(const std::string& name, VariableKind kind, const Shape& shape) {
    VariableSpecProto spec;
    spec.set_name(name);
    spec.set_dtype(DT_FLOAT32);
    spec.set_kind(kind);
    for (int64_t d : shape) spec.add_shape(d);
    vars_[name] = std::make_unique<Variable>(spec, nullptr);
  }

  absl::StatusOr<Variable*> Find(const std::string& name) {
    auto it = vars_.find(name);
    if (it == vars_.end())
      return absl::NotFoundError(absl::StrCat("unknown variable '", name, "'"));
    return it->second.get();
  }

  absl::StatusOr<CheckedPush> Check(const PushRequest& request, bool* non_finite = nullptr) {
    return CheckGradients(
        request, [this](const std::string& name) { return Find(name); }, non_finite);
  }

  absl::StatusOr<RowRequest> Rows(const std::string& name, const std::string& ids) {
    return CheckRowIds([this](const std::string& n) { return Find(n); }, name, ids, "lookup");
  }

  absl::flat_hash_map<std::string, std::unique_ptr<Variable>> vars_;
};

TEST(CheckUpdateKeyTest, NegativeStepOrGlobalStepIsRefusedNamingTheClosure) {
  UpdateKey key;
  key.set_closure_id(7);
  key.set_step(0);
  EXPECT_TRUE(CheckUpdateKey(key).ok());
  key.set_global_step(0);
  EXPECT_TRUE(CheckUpdateKey(key).ok());

  key.set_step(-1);
  absl::Status s = CheckUpdateKey(key);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(s), AllOf(HasSubstr("closure 7"), HasSubstr("step -1 is negative")));

  key.set_step(2);
  key.set_global_step(-5);
  s = CheckUpdateKey(key);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(s), AllOf(HasSubstr("closure 7"), HasSubstr("global_step -5 is negative")));
}

TEST_F(PushValidationTest, AGoodPushIsResolvedWithItsBytes) {
  PushRequest req;
  *req.add_gradients() = Grad("w", {2, 3}, 0.5f);
  *req.add_sparse() = Sparse("e", {3, 0}, 2);
  *req.add_sparse() = Sparse("t", {uint64_t{1} << 63, 5}, 2);
  absl::StatusOr<CheckedPush> checked = Check(req);
  ASSERT_TRUE(checked.ok()) << checked.status();

  ASSERT_EQ(checked->dense.size(), 1u);
  EXPECT_EQ(checked->dense[0].first, vars_["w"].get());
  EXPECT_THAT(checked->dense[0].second, ElementsAre(0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f));
  ASSERT_EQ(checked->sparse.size(), 2u);
  EXPECT_EQ(checked->sparse[0].first.var, vars_["e"].get());
  EXPECT_THAT(checked->sparse[0].first.rows, ElementsAre(3, 0));
  EXPECT_EQ(checked->sparse[0].second.size(), 4u);
  // A hash table's ids are keys, any uint64; they have no row numbers.
  EXPECT_THAT(checked->sparse[1].first.ids, ElementsAre(uint64_t{1} << 63, 5));
  EXPECT_TRUE(checked->sparse[1].first.rows.empty());
  EXPECT_EQ(checked->bytes, (6 + 4 + 4) * static_cast<int64_t>(sizeof(float)));
}

TEST_F(PushValidationTest, AnUnknownVariableIsNotFound) {
  PushRequest req;
  *req.add_gradients() = Grad("missing", {1}, 1.0f);
  absl::Status s = Check(req).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(Message(s), HasSubstr("'missing'"));

  PushRequest sparse;
  *sparse.add_sparse() = Sparse("gone", {0}, 2);
  s = Check(sparse).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(Message(s), HasSubstr("'gone'"));
}

TEST_F(PushValidationTest, AWholeGradientForAHashTableIsRefused) {
  PushRequest req;
  *req.add_gradients() = Grad("t", {2}, 1.0f);
  absl::Status s = Check(req).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(s), AllOf(HasSubstr("'t'"), HasSubstr("HASH_TABLE"), HasSubstr("sparse")));
}

TEST_F(PushValidationTest, AWrongShapeNamesTheVariableAndBothShapes) {
  PushRequest req;
  *req.add_gradients() = Grad("w", {3, 2}, 1.0f);
  absl::Status s = Check(req).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(s), AllOf(HasSubstr("'w'"), HasSubstr("[3, 2]"), HasSubstr("[2, 3]")));
}

TEST_F(PushValidationTest, AWrongDtypeIsRefused) {
  PushRequest req;
  NamedTensor* g = req.add_gradients();
  *g = Grad("w", {2, 3}, 1.0f);
  g->mutable_tensor()->set_dtype(DT_INVALID);
  absl::Status s = Check(req).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(s), AllOf(HasSubstr("'w'"), HasSubstr("dtype")));
}

TEST_F(PushValidationTest, AWrongByteCountIsRefused) {
  PushRequest req;
  NamedTensor* g = req.add_gradients();
  *g = Grad("w", {2, 3}, 1.0f);
  g->mutable_tensor()->mutable_data()->resize(20);
  absl::Status s = Check(req).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(s), AllOf(HasSubstr("'w'"), HasSubstr("bytes")));
}

TEST_F(PushValidationTest, RowsOfAVariableWithoutRowsAreRefusedNamingItsShape) {
  PushRequest req;
  *req.add_sparse() = Sparse("b", {0}, 3);
  absl::Status s = Check(req).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(s), AllOf(HasSubstr("sparse gradient of variable 'b'"),
                                HasSubstr("rank-2 DENSE"), HasSubstr("[3]")));
}

TEST_F(PushValidationTest, IdsNotAMultipleOfEightBytesAreRefused) {
  PushRequest req;
  SparseGradient* g = req.add_sparse();
  *g = Sparse("e", {1}, 2);
  g->set_ids("12345");
  absl::Status s = Check(req).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(s), HasSubstr("sparse gradient of variable 'e'"));
}

TEST_F(PushValidationTest, ADenseIdOutOfRangeIsRefused) {
  PushRequest req;
  *req.add_sparse() = Sparse("e", {0, 4}, 2);
  absl::Status s = Check(req).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(s), AllOf(HasSubstr("id 4 outside [0, 4)"), HasSubstr("'e'")));

  // An id past 2^63 reads as a negative row.
  PushRequest negative;
  *negative.add_sparse() = Sparse("e", {~uint64_t{0}}, 2);
  s = Check(negative).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(s), HasSubstr("id -1 outside [0, 4)"));
}

TEST_F(PushValidationTest, ARepeatedIdIsRefusedAndNamed) {
  PushRequest req;
  *req.add_sparse() = Sparse("e", {1, 2, 1}, 2);
  absl::Status s = Check(req).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(s), AllOf(HasSubstr("'e'"), HasSubstr("id 1 appears more than once")));

  PushRequest table;
  *table.add_sparse() = Sparse("t", {~uint64_t{0}, ~uint64_t{0}}, 2);
  s = Check(table).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  // A hash table's key is named unsigned.
  EXPECT_THAT(Message(s), HasSubstr("id 18446744073709551615 appears more than once"));
}

TEST_F(PushValidationTest, SparseRowsNotNByDimAreRefused) {
  PushRequest req;
  SparseGradient* g = req.add_sparse();
  *g = Sparse("e", {0, 1}, 2);
  EncodeTensor({2, 3}, std::vector<float>(6, 1.0f), g->mutable_rows());
  absl::Status s = Check(req).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(s), AllOf(HasSubstr("gradient rows for variable 'e'"), HasSubstr("[2, 3]"),
                                HasSubstr("[2, 2]")));
}

TEST_F(PushValidationTest, ANonFiniteDenseValueIsNamedAndFlagged) {
  PushRequest req;
  req.set_job("j1");
  NamedTensor* g = req.add_gradients();
  std::vector<float> values(6, 1.0f);
  values[4] = std::numeric_limits<float>::quiet_NaN();
  g->set_name("w");
  EncodeTensor({2, 3}, values, g->mutable_tensor());
  bool non_finite = false;
  absl::Status s = Check(req, &non_finite).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(s), AllOf(HasSubstr("job 'j1'"), HasSubstr("'w'"),
                                HasSubstr("at element 4 of 6")));
  EXPECT_TRUE(non_finite);
}

TEST_F(PushValidationTest, ANonFiniteSparseRowIsNamedAndFlagged) {
  PushRequest req;
  req.set_job("j2");
  *req.add_sparse() = Sparse("t", {9}, 2, -std::numeric_limits<float>::infinity());
  bool non_finite = false;
  absl::Status s = Check(req, &non_finite).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(s), AllOf(HasSubstr("job 'j2'"), HasSubstr("sparse gradient rows"),
                                HasSubstr("'t'"), HasSubstr("-inf"), HasSubstr("at element 0")));
  EXPECT_TRUE(non_finite);
}

TEST_F(PushValidationTest, OtherRefusalsAreNotFlaggedNonFinite) {
  PushRequest req;
  *req.add_gradients() = Grad("w", {3, 2}, 1.0f);
  bool non_finite = false;
  EXPECT_FALSE(Check(req, &non_finite).ok());
  EXPECT_FALSE(non_finite);
}

TEST_F(PushValidationTest, TheFirstBadGradientInRequestOrderIsReported) {
  // A NaN in the first gradient is reported before an unknown second one.
  PushRequest req;
  *req.add_gradients() = Grad("w", {2, 3}, std::nanf(""));
  *req.add_gradients() = Grad("missing", {1}, 1.0f);
  bool non_finite = false;
  absl::Status s = Check(req, &non_finite).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(non_finite);
  // Whole gradients are checked before sparse ones.
  PushRequest mixed;
  *mixed.add_sparse() = Sparse("gone", {0}, 2);
  *mixed.add_gradients() = Grad("w", {1}, 1.0f);
  EXPECT_EQ(Check(mixed).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(PushValidationTest, CheckRowIdsServesLookupsToo) {
  absl::StatusOr<RowRequest> r = Rows("e", EncodeRowIds(std::vector<uint64_t>{2, 2, 0}));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->rows, ElementsAre(2, 2, 0));  // a lookup may repeat ids
  absl::Status s = Rows("b", EncodeRowIds(std::vector<uint64_t>{0})).status();
  EXPECT_THAT(Message(s), HasSubstr("lookup of variable 'b'"));
  EXPECT_EQ(Rows("nope", "").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace variable_store_internal
}  // namespace pscluster
