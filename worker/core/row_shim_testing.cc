#include "worker/core/row_shim_testing.h"

#include <algorithm>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/row_ids.h"
#include "common/tensor.h"

namespace pscluster {

absl::Status RowShim::CreateVariables(const CreateVariablesRequest& request,
                                      CreateVariablesResponse* response) {
  return inner_.CreateVariables(request, response);
}

absl::Status RowShim::Pull(const PullRequest& request, PullResponse* response) {
  ++pulls;
  pull_log.push_back(request);
  PullRequest whole;
  *whole.mutable_names() = request.names();
  for (const RowIds& l : request.lookups()) whole.add_names(l.name());
  PullResponse got;
  if (absl::Status s = inner_.Pull(whole, &got); !s.ok()) return s;
  for (int i = 0; i < request.names_size(); ++i) *response->add_tensors() = got.tensors(i);
  for (int l = 0; l < request.lookups_size(); ++l) {
    auto table = DecodeTensor(got.tensors(request.names_size() + l).tensor());
    if (!table.ok()) return table.status();
    auto ids = DecodeRowIds(request.lookups(l).ids(), request.lookups(l).name());
    if (!ids.ok()) return ids.status();
    const int64_t dim = table->shape()[1];
    std::vector<float> rows;
    for (uint64_t id : *ids) {
      if (id >= static_cast<uint64_t>(table->shape()[0])) {
        return absl::InvalidArgumentError(absl::StrCat("row ", id, " out of range"));
      }
      rows.insert(rows.end(), table->data() + id * dim, table->data() + (id + 1) * dim);
    }
    NamedTensor* out = response->add_rows();
    out->set_name(request.lookups(l).name());
    EncodeTensor({static_cast<int64_t>(ids->size()), dim}, rows, out->mutable_tensor());
  }
  return absl::OkStatus();
}

absl::Status RowShim::Push(const PushRequest& request, PushResponse* response) {
  ++pushes;
  push_log.push_back(request);
  PushRequest dense;
  *dense.mutable_gradients() = request.gradients();
  for (const SparseGradient& g : request.sparse()) {
    PullRequest req;
    req.add_names(g.name());
    PullResponse got;
    if (absl::Status s = inner_.Pull(req, &got); !s.ok()) return s;
    const Shape shape(got.tensors(0).tensor().shape().begin(),
                      got.tensors(0).tensor().shape().end());
    auto rows = DecodeTensor(g.rows());
    if (!rows.ok()) return rows.status();
    auto ids = DecodeRowIds(g.ids(), g.name());
    if (!ids.ok()) return ids.status();
    const int64_t dim = shape[1];
    std::vector<float> full(NumElements(shape), 0.0f);
    absl::flat_hash_set<uint64_t> seen;
    for (size_t i = 0; i < ids->size(); ++i) {
      const uint64_t id = (*ids)[i];
      if (!seen.insert(id).second) {
        return absl::InvalidArgumentError(absl::StrCat("id ", id, " repeated in '", g.name(), "'"));
      }
      if (id >= static_cast<uint64_t>(shape[0])) {
        return absl::InvalidArgumentError(absl::StrCat("row ", id, " out of range"));
      }
      std::copy(rows->data() + i * dim, rows->data() + (i + 1) * dim, full.begin() + id * dim);
    }
    NamedTensor* out = dense.add_gradients();
    out->set_name(g.name());
    EncodeTensor(shape, full, out->mutable_tensor());
  }
  return inner_.Push(dense, response);
}

absl::Status RowShim::Stats(const StatsRequest& request, StatsResponse* response) {
  return inner_.Stats(request, response);
}

}  // namespace pscluster
