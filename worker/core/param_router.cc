#include "worker/core/param_router.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/model_variables.h"
#include "common/row_ids.h"
#include "common/status_macros.h"

namespace pscluster {
namespace {

// Ids in RowIds.ids / SparseGradient.ids (common/row_ids.h: 8 bytes each).
int64_t IdCount(const std::string& ids) { return static_cast<int64_t>(ids.size() / 8); }

}  // namespace

void DedupeIds(absl::Span<const uint64_t> ids, std::vector<uint64_t>* unique,
               std::vector<int64_t>* index) {
  unique->clear();
  index->resize(ids.size());
  absl::flat_hash_map<uint64_t, int64_t> position;
  position.reserve(ids.size());
  for (size_t k = 0; k < ids.size(); ++k) {
    auto [it, inserted] = position.try_emplace(ids[k], static_cast<int64_t>(unique->size()));
    if (inserted) unique->push_back(ids[k]);
    (*index)[k] = it->second;
  }
}

bool HasWork(const PullRequest& request) {
  return request.names_size() > 0 || request.lookups_size() > 0;
}

bool HasWork(const PushRequest& request) {
  return request.gradients_size() > 0 || request.sparse_size() > 0;
}

absl::StatusOr<std::unique_ptr<ParamRouter>> ParamRouter::Create(
    const std::vector<VariableSpecProto>& variables,
    const std::vector<VariablePlacementProto>& placement, int num_ps) {
  if (num_ps < 1) return absl::InvalidArgumentError("the job has no PS task");
  absl::flat_hash_map<std::string, const VariablePlacementProto*> by_name;
  for (const VariablePlacementProto& p : placement) {
    if (!by_name.emplace(p.name(), &p).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("variable '", p.name(), "' is placed twice"));
    }
  }
  auto router = std::unique_ptr<ParamRouter>(new ParamRouter());
  router->num_ps_ = num_ps;
  router->dense_by_ps_.resize(num_ps);
  auto check_ps = [num_ps](const std::string& what, int ps) {
    if (ps < 0 || ps >= num_ps) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " is placed on PS ", ps, ", outside [0, ", num_ps, ")"));
    }
    return absl::OkStatus();
  };
  for (size_t v = 0; v < variables.size(); ++v) {
    const VariableSpecProto& var = variables[v];
    const std::string what = absl::StrCat("variable '", var.name(), "'");
    auto it = by_name.find(var.name());
    if (it == by_name.end()) return absl::InvalidArgumentError(what + " has no placement");
    const VariablePlacementProto& p = *it->second;
    const Shape shape(var.shape().begin(), var.shape().end());
    const int64_t rows = shape.empty() ? 1 : shape[0];

    std::vector<Piece> pieces;
    if (p.shards_size() == 0) {
      if (var.kind() == HASH_TABLE) return absl::InvalidArgumentError(what + " has no shards");
      RETURN_IF_ERROR(check_ps(what, p.ps_index()));
      pieces.push_back({var.name(), p.ps_index(), 0, rows});
    } else {
      int64_t next = 0;
      for (const ShardProto& s : p.shards()) {
        const std::string shard = absl::StrCat(what, " shard '", s.name(), "'");
        if (s.name().empty()) return absl::InvalidArgumentError(what + " has a shard without a name");
        RETURN_IF_ERROR(check_ps(shard, s.ps_index()));
        if (var.kind() != HASH_TABLE) {
          if (shape.empty()) return absl::InvalidArgumentError(what + " is a scalar but has shards");
          if (s.row_offset() != next || s.rows() < 0) {
            return absl::InvalidArgumentError(absl::StrCat(
                shard, " covers rows [", s.row_offset(), ", ", s.row_offset() + s.rows(),
                ") but the next row is ", next, " (shards must be contiguous from row 0)"));
          }
          next += s.rows();
        }
        pieces.push_back({s.name(), s.ps_index(), s.row_offset(), s.rows()});
      }
      if (var.kind() != HASH_TABLE && next != rows) {
        return absl::InvalidArgumentError(absl::StrCat(what, "'s shards cover ", next, " of its ",
                                                       rows, " rows"));
      }
    }

    if (IsRowAccessed(var)) {
      Table t;
      t.var = static_cast<int>(v);
      t.name = var.name();
      t.hashed = var.kind() == HASH_TABLE;
      if (t.hashed) {
        t.dim = NumElements(shape);
      } else {
        if (shape.size() != 2) return absl::InvalidArgumentError(what + " is not [vocab, dim]");
        t.vocab = shape[0];
        t.dim = shape[1];
      }
      t.pieces = std::move(pieces);
      router->tables_.push_back(std::move(t));
    } else {
      Dense d;
      d.var = static_cast<int>(v);
      d.shape = shape;
      d.row_elems = shape.empty() ? 1 : NumElements(absl::MakeSpan(shape).subspan(1));
      d.partitioned = p.shards_size() > 0;
      d.pieces = std::move(pieces);
      const int di = static_cast<int>(router->dense_.size());
      for (size_t i = 0; i < d.pieces.size(); ++i) {
        router->dense_by_ps_[d.pieces[i].ps].push_back({di, static_cast<int>(i)});
      }
      router->dense_.push_back(std::move(d));
    }
  }
  return router;
}

absl::Status ParamRouter::PlanStep(bool with_dense,
                                   const std::vector<std::vector<uint64_t>>& unique_ids,
                                   RoutedStep* step) const {
  step->pull.assign(num_ps_, PullRequest());
  step->with_dense = with_dense;
  step->unique_count.assign(tables_.size(), 0);
  step->slots.resize(tables_.size());
  step->lookup_table.assign(num_ps_, {});
  if (with_dense) {
    for (int ps = 0; ps < num_ps_; ++ps) {
      for (const auto& [d, i] : dense_by_ps_[ps]) step->pull[ps].add_names(dense_[d].pieces[i].name);
    }
  }
  for (size_t t = 0; t < tables_.size(); ++t) {
    const Table& table = tables_[t];
    const std::vector<uint64_t>& ids = unique_ids[t];
    step->unique_count[t] = static_cast<int64_t>(ids.size());
    std::vector<RoutedStep::Slot>& slots = step->slots[t];
    slots.resize(ids.size());
    // The keys sent to each piece of this table and its RowIds, created on
    // first use.
    std::vector<std::vector<uint64_t>> keys(table.pieces.size());
    std::vector<RowIds*> lookup_of(table.pieces.size(), nullptr);
    std::vector<int> lookup_index(table.pieces.size(), -1);
    const int n = static_cast<int>(table.pieces.size());
    for (size_t u = 0; u < ids.size(); ++u) {
      const uint64_t id = ids[u];
      int piece = 0;
      uint64_t key = id;
      if (table.hashed) {
        piece = HashTableShard(id, n);
      } else {
        if (id >= static_cast<uint64_t>(table.vocab)) {
          return absl::InvalidArgumentError(absl::StrCat("id ", id, " of '", table.name,
                                                         "' is outside its vocabulary [0, ",
                                                         table.vocab, ")"));
        }
        // The last piece whose row_offset <= id (pieces are contiguous).
        const auto it = std::upper_bound(
            table.pieces.begin(), table.pieces.end(), static_cast<int64_t>(id),
            [](int64_t row, const Piece& p) { return row < p.row_offset; });
        piece = static_cast<int>(it - table.pieces.begin()) - 1;
        key = id - static_cast<uint64_t>(table.pieces[piece].row_offset);
      }
      const int ps = table.pieces[piece].ps;
      if (lookup_of[piece] == nullptr) {
        lookup_index[piece] = step->pull[ps].lookups_size();
        lookup_of[piece] = step->pull[ps].add_lookups();
        lookup_of[piece]->set_name(table.pieces[piece].name);
        step->lookup_table[ps].push_back(static_cast<int>(t));
      }
      slots[u] = {ps, lookup_index[piece], static_cast<int64_t>(keys[piece].size())};
      keys[piece].push_back(key);
    }
    for (size_t p = 0; p < keys.size(); ++p) {
      if (lookup_of[p] != nullptr) lookup_of[p]->set_ids(EncodeRowIds(keys[p]));
    }
  }
  return absl::OkStatus();
}

absl::Status ParamRouter::ReadPull(const RoutedStep& step, std::vector<PullResponse>* answers,
                                   std::vector<Tensor>* params, std::vector<Tensor>* rows) const {
  const std::vector<PullResponse>& responses = *answers;
  if (static_cast<int>(responses.size()) != num_ps_) {
    return absl::InternalError(
        absl::StrCat(responses.size(), " pull responses for ", num_ps_, " PS"));
  }
  // Validate every response first, keeping views of the lookups' rows.
  std::vector<std::vector<absl::Span<const float>>> looked_up(num_ps_);
  for (int ps = 0; ps < num_ps_; ++ps) {
    const PullRequest& request = step.pull[ps];
    if (!HasWork(request)) continue;
    const PullResponse& response = responses[ps];
    if (response.tensors_size() != request.names_size() ||
        response.rows_size() != request.lookups_size()) {
      return absl::InternalError(absl::StrCat(
          "PS ", ps, " answered ", response.tensors_size(), " tensors and ", response.rows_size(),
          " lookups for ", request.names_size(), " names and ", request.lookups_size(),
          " lookups"));
    }
    for (int l = 0; l < request.lookups_size(); ++l) {
      const RowIds& ids = request.lookups(l);
      const int64_t dim = tables_[step.lookup_table[ps][l]].dim;
      auto view = TensorView(response.rows(l).tensor(), {IdCount(ids.ids()), dim},
                             absl::StrCat("rows of '", ids.name(), "' from PS ", ps));
      if (!view.ok()) return absl::InternalError(view.status().message());
      looked_up[ps].push_back(*view);
    }
  }
  if (step.with_dense) {
    for (int ps = 0; ps < num_ps_; ++ps) {
      const std::vector<std::pair<int, int>>& names = dense_by_ps_[ps];
      for (size_t i = 0; i < names.size(); ++i) {
        const Dense& d = dense_[names[i].first];
        const Piece& piece = d.pieces[names[i].second];
        Shape piece_shape = d.shape;
        if (d.partitioned) piece_shape[0] = piece.rows;
        const NamedTensor& got = responses[ps].tensors(static_cast<int>(i));
        auto view = TensorView(got.tensor(), piece_shape,
                               absl::StrCat("'", piece.name, "' from PS ", ps));
        if (!view.ok()) return absl::InternalError(view.status().message());
        Tensor& dst = (*params)[d.var];
        if (dst.shape() != d.shape) dst = Tensor(d.shape);
        if (!d.partitioned) {
          // The whole variable: take the answer's bytes instead of copying
          // them (the view checked their size against the shape).
          dst.SwapBytes((*answers)[ps]
                            .mutable_tensors(static_cast<int>(i))
                            ->mutable_tensor()
                            ->mutable_data());
          continue;
        }
        std::memcpy(dst.data() + piece.row_offset * d.row_elems, view->data(),
                    view->size() * sizeof(float));
      }
    }
  }
  rows->resize(tables_.size());
  for (size_t t = 0; t < tables_.size(); ++t) {
    const int64_t dim = tables_[t].dim;
    const Shape shape = {step.unique_count[t], dim};
    Tensor& dst = (*rows)[t];
    if (dst.shape() != shape) dst = Tensor(shape);
    const std::vector<RoutedStep::Slot>& slots = step.slots[t];
    for (int64_t u = 0; u < step.unique_count[t]; ++u) {
      const RoutedStep::Slot& s = slots[u];
      std::memcpy(dst.data() + u * dim, looked_up[s.ps][s.lookup].data() + s.pos * dim,
                  dim * sizeof(float));
    }
  }
  return absl::OkStatus();
}

void ParamRouter::BuildPush(const RoutedStep& step, std::vector<Tensor>* grads,
                            const std::vector<Tensor>& row_grads,
                            std::vector<PushRequest>* push) const {
  // The previous step's gradient buffers, taken out before the requests are
  // cleared (cleared, not replaced: the requests keep their buffers from
  // step to step).
  push->resize(num_ps_);
  std::vector<std::vector<std::string>> previous(num_ps_);
  for (int ps = 0; ps < num_ps_; ++ps) {
    PushRequest& request = (*push)[ps];
    previous[ps].resize(request.gradients_size());
    for (int k = 0; k < request.gradients_size(); ++k) {
      previous[ps][k].swap(*request.mutable_gradients(k)->mutable_tensor()->mutable_data());
    }
    request.Clear();
  }
  if (!grads->empty()) {
    for (int ps = 0; ps < num_ps_; ++ps) {
      int k = 0;  // the gradient's index in this request
      for (const auto& [di, i] : dense_by_ps_[ps]) {
        const Dense& d = dense_[di];
        const Piece& piece = d.pieces[i];
        Shape piece_shape = d.shape;
        if (d.partitioned) piece_shape[0] = piece.rows;
        NamedTensor* g = (*push)[ps].add_gradients();
        g->set_name(piece.name);
        Tensor& full = (*grads)[d.var];
        std::string* old = k < static_cast<int>(previous[ps].size()) ? &previous[ps][k] : nullptr;
        ++k;
        if (!d.partitioned && old != nullptr &&
            static_cast<int64_t>(old->size()) == full.num_bytes()) {
          // Trade buffers: the gradient's bytes go out as they are, and the
          // tensor takes last step's request buffer for the next gradient.
          TensorProto* t = g->mutable_tensor();
          t->set_dtype(DT_FLOAT32);
          t->mutable_shape()->Assign(piece_shape.begin(), piece_shape.end());
          full.SwapBytes(t->mutable_data());  // the request's data was empty
          full.SwapBytes(old);
          continue;
        }
        EncodeTensor(piece_shape,
                     absl::MakeConstSpan(full.data() + piece.row_offset * d.row_elems,
                                         NumElements(piece_shape)),
                     g->mutable_tensor());
      }
    }
  }
  // Gather each lookup's gradient rows in the order of its ids.
  std::vector<std::vector<std::vector<float>>> buffers(num_ps_);
  for (int ps = 0; ps < num_ps_; ++ps) {
    const PullRequest& request = step.pull[ps];
    buffers[ps].resize(request.lookups_size());
    for (int l = 0; l < request.lookups_size(); ++l) {
      buffers[ps][l].resize(IdCount(request.lookups(l).ids()) *
                            tables_[step.lookup_table[ps][l]].dim);
    }
  }
  for (size_t t = 0; t < tables_.size(); ++t) {
    const int64_t dim = tables_[t].dim;
    for (int64_t u = 0; u < step.unique_count[t]; ++u) {
      const RoutedStep::Slot& s = step.slots[t][u];
      std::memcpy(buffers[s.ps][s.lookup].data() + s.pos * dim, row_grads[t].data() + u * dim,
                  dim * sizeof(float));
    }
  }
  for (int ps = 0; ps < num_ps_; ++ps) {
    const PullRequest& request = step.pull[ps];
    for (int l = 0; l < request.lookups_size(); ++l) {
      const RowIds& ids = request.lookups(l);
      SparseGradient* g = (*push)[ps].add_sparse();
      g->set_name(ids.name());
      g->set_ids(ids.ids());
      const int64_t dim = tables_[step.lookup_table[ps][l]].dim;
      EncodeTensor({IdCount(ids.ids()), dim}, buffers[ps][l], g->mutable_rows());
    }
  }
}

}  // namespace pscluster
