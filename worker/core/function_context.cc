#include "worker/core/function_context.h"

#include <algorithm>
#include <cstring>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/model_variables.h"
#include "common/row_ids.h"
#include "common/status_macros.h"

namespace pscluster {

absl::StatusOr<VariableTable> VariableTable::Create(
    const std::vector<VariableSpecProto>& variables,
    const std::vector<VariablePlacementProto>& placement, int num_ps) {
  VariableTable table;
  table.num_ps_ = num_ps;
  absl::flat_hash_map<std::string, const VariablePlacementProto*> placed;
  for (const VariablePlacementProto& p : placement) {
    if (!placed.emplace(p.name(), &p).second) {
      return absl::InvalidArgumentError(absl::StrCat("variable '", p.name(), "' is placed twice"));
    }
  }
  for (const VariableSpecProto& spec : variables) {
    if ((spec.kind() != DENSE && spec.kind() != HASH_TABLE) || spec.dtype() != DT_FLOAT32) {
      return absl::InvalidArgumentError(
          absl::StrCat("variable '", spec.name(),
                       "': a program job's variables are float32, dense or hash "
                       "tables"));
    }
    auto it = placed.find(spec.name());
    if (it == placed.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("variable '", spec.name(), "' has no placement"));
    }
    Variable v;
    v.spec = spec;
    v.shape.assign(spec.shape().begin(), spec.shape().end());
    for (size_t d = 1; d < v.shape.size(); ++d) v.row_elems *= v.shape[d];
    const int64_t rows = v.shape.empty() ? 1 : v.shape[0];
    const VariablePlacementProto& p = *it->second;
    if (spec.kind() == HASH_TABLE) {
      // One shard per PS, shard i on PS i (PlanVariables).
      if (v.shape.size() != 1 || v.shape[0] < 1 || p.shards_size() != num_ps) {
        return absl::InvalidArgumentError(
            absl::StrCat("hash table '", spec.name(), "' must be [dim] with one shard per PS"));
      }
      v.hash_table = true;
      v.row_elems = v.shape[0];
      for (int i = 0; i < p.shards_size(); ++i) {
        if (p.shards(i).ps_index() != i || p.shards(i).name().empty()) {
          return absl::InvalidArgumentError(
              absl::StrCat("hash table '", spec.name(), "': shard ", i, " is not on PS ", i));
        }
        v.pieces.push_back(Piece{p.shards(i).name(), i, 0, 0});
      }
    } else if (p.shards_size() == 0) {
      v.pieces.push_back(Piece{spec.name(), p.ps_index(), 0, rows});
    } else {
      int64_t next = 0;
      for (const ShardProto& s : p.shards()) {
        if (s.row_offset() != next || s.rows() <= 0 || s.name().empty()) {
          return absl::InvalidArgumentError(absl::StrCat(
              "variable '", spec.name(), "': its shards do not cover its rows contiguously"));
        }
        v.pieces.push_back(Piece{s.name(), s.ps_index(), s.row_offset(), s.rows()});
        next += s.rows();
      }
      if (next != rows) {
        return absl::InvalidArgumentError(absl::StrCat(
            "variable '", spec.name(), "': its shards hold ", next, " rows of ", rows));
      }
    }
    for (const Piece& piece : v.pieces) {
      if (piece.ps < 0 || piece.ps >= num_ps) {
        return absl::InvalidArgumentError(absl::StrCat(
            "variable '", spec.name(), "' is placed on PS ", piece.ps, " of ", num_ps));
      }
    }
    table.variables_.emplace(spec.name(), std::move(v));
  }
  return table;
}

const VariableTable::Variable* VariableTable::Find(const std::string& name) const {
  auto it = variables_.find(name);
  return it == variables_.end() ? nullptr : &it->second;
}

std::string VariableTable::Names() const {
  std::vector<std::string> names;
  for (const auto& [name, v] : variables_) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names.empty() ? "none" : absl::StrJoin(names, ", ");
}

namespace {

// The piece of `v` holding `row` (a hash table's: its id's shard).
// REQUIRES: 0 <= row < rows for a dense variable.
int PieceOf(const VariableTable::Variable& v, int64_t row) {
  if (v.hash_table) {
    return HashTableShard(static_cast<uint64_t>(row), static_cast<int>(v.pieces.size()));
  }
  int lo = 0;
  int hi = static_cast<int>(v.pieces.size()) - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (v.pieces[mid].row_offset <= row) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

absl::StatusOr<const VariableTable::Variable*> Lookup(const VariableTable& table,
                                                      const std::string& name) {
  const VariableTable::Variable* v = table.Find(name);
  if (v == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown variable '", name, "' (the program declared: ", table.Names(), ")"));
  }
  return v;
}

// The id of `row` within piece `piece` (a hash table's ids are its keys).
int64_t LocalId(const VariableTable::Variable& v, int piece, int64_t row) {
  return v.hash_table ? row : row - v.pieces[piece].row_offset;
}

// The shape of `n` rows of `v`.
Shape RowsShape(const VariableTable::Variable& v, int64_t n) {
  if (v.hash_table) return {n, v.row_elems};
  Shape shape = v.shape;
  shape[0] = n;
  return shape;
}

absl::Status NotWhole(const VariableTable::Variable& v) {
  if (!v.hash_table) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("variable '", v.spec.name(),
                                                 "' is a hash table: read and update it by rows "
                                                 "(PullRows, PushRows)"));
}

// The whole variables `names` (no hash table among them).
absl::StatusOr<std::vector<const VariableTable::Variable*>> WholeVariables(
    const VariableTable& table, const std::vector<std::string>& names) {
  std::vector<const VariableTable::Variable*> vars;
  vars.reserve(names.size());
  for (const std::string& name : names) {
    ASSIGN_OR_RETURN(const VariableTable::Variable* v, Lookup(table, name));
    RETURN_IF_ERROR(NotWhole(*v));
    vars.push_back(v);
  }
  return vars;
}

absl::Status CheckRows(const VariableTable::Variable& v, absl::Span<const int64_t> ids) {
  if (v.hash_table) return absl::OkStatus();  // any int64 key
  if (v.shape.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("variable '", v.spec.name(), "' is a scalar: it has no rows"));
  }
  for (int64_t id : ids) {
    if (id < 0 || id >= v.shape[0]) {
      return absl::InvalidArgumentError(absl::StrCat("row ", id, " is outside variable '",
                                                     v.spec.name(), "' of ", v.shape[0], " rows"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

FunctionContext::FunctionContext(const VariableTable* table, const std::vector<PsClient*>* ps,
                                 const RunClosureRequest& closure)
    : table_(table), ps_(ps), closure_(closure) {}

absl::Status FunctionContext::Cluster(absl::Status s) {
  if (cluster_error_.ok()) cluster_error_ = s;
  return s;
}

UpdateKey FunctionContext::LeaseKey() const {
  UpdateKey key;
  key.set_closure_id(closure_.closure_id());
  key.set_lease(closure_.lease());
  key.set_lease_steps(closure_.lease_steps());
  return key;
}

absl::StatusOr<UpdateKey> FunctionContext::NextStep() {
  if (!closure_.lease().empty() && steps_ >= closure_.lease_steps()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "closure ", closure_.closure_id(), " pushed more than the ", closure_.lease_steps(),
        " steps its lease covers (ClusterCoordinator::Options::max_steps_per_closure)"));
  }
  UpdateKey key = LeaseKey();
  key.set_step(steps_);
  return key;
}

void FunctionContext::AddPulls(absl::Span<const VariableTable::Variable* const> vars,
                               std::vector<PullRequest>* pull) const {
  for (const VariableTable::Variable* v : vars) {
    for (const auto& piece : v->pieces) (*pull)[piece.ps].add_names(piece.name);
  }
}

absl::Status FunctionContext::SendPulls(std::vector<PullRequest>* pull,
                                        const std::vector<bool>& skip) {
  pulled_.resize(table_->num_ps());
  for (int p = 0; p < table_->num_ps(); ++p) {
    if ((*pull)[p].names_size() == 0 || skip[p]) continue;
    (*pull)[p].set_job(closure_.job_id());
    *(*pull)[p].mutable_lease() = LeaseKey();
    if (absl::Status s = (*ps_)[p]->Pull((*pull)[p], &pulled_[p]); !s.ok()) return Cluster(s);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Tensor>> FunctionContext::ReadPulls(
    absl::Span<const VariableTable::Variable* const> vars) {
  std::vector<PullResponse>& pulled = pulled_;
  // Each PS answers its names in request order.
  std::vector<int> next(table_->num_ps(), 0);
  std::vector<Tensor> out;
  out.reserve(vars.size());
  for (const VariableTable::Variable* v : vars) {
    Tensor t(v->shape);
    for (const auto& piece : v->pieces) {
      const int k = next[piece.ps]++;
      if (k >= pulled[piece.ps].tensors_size()) {
        return Cluster(absl::InternalError(
            absl::StrCat("PS ", piece.ps, " did not answer the pull of '", piece.name, "'")));
      }
      Shape shape = v->shape;
      if (!shape.empty()) shape[0] = piece.rows;
      TensorProto* proto = pulled[piece.ps].mutable_tensors(k)->mutable_tensor();
      ASSIGN_OR_RETURN(absl::Span<const float> values, TensorView(*proto, shape, piece.name));
      if (v->pieces.size() == 1) {
        // The tensor takes the answer's bytes, and the answer the tensor's
        // buffer of the same size, for the next call to read into.
        t.SwapBytes(proto->mutable_data());
      } else {
        std::memcpy(t.data() + piece.row_offset * v->row_elems, values.data(),
                    values.size() * sizeof(float));
      }
    }
    out.push_back(std::move(t));
  }
  return out;
}

absl::StatusOr<std::vector<Tensor>> FunctionContext::Pull(
    const std::vector<std::string>& variables) {
  ASSIGN_OR_RETURN(std::vector<const VariableTable::Variable*> vars,
                   WholeVariables(*table_, variables));
  std::vector<PullRequest> pull(table_->num_ps());
  AddPulls(vars, &pull);
  RETURN_IF_ERROR(SendPulls(&pull, std::vector<bool>(table_->num_ps(), false)));
  return ReadPulls(vars);
}

absl::StatusOr<Tensor> FunctionContext::Pull(const std::string& variable) {
  ASSIGN_OR_RETURN(std::vector<Tensor> one, Pull(std::vector<std::string>{variable}));
  return std::move(one[0]);
}

absl::StatusOr<Tensor> FunctionContext::PullRows(const std::string& variable,
                                                 absl::Span<const int64_t> ids) {
  ASSIGN_OR_RETURN(const VariableTable::Variable* v, Lookup(*table_, variable));
  RETURN_IF_ERROR(CheckRows(*v, ids));
  // One lookup per piece touched; each piece's ids are local to it.
  std::vector<std::vector<int64_t>> local(v->pieces.size());
  std::vector<std::vector<int64_t>> positions(v->pieces.size());
  for (size_t k = 0; k < ids.size(); ++k) {
    const int piece = PieceOf(*v, ids[k]);
    local[piece].push_back(LocalId(*v, piece, ids[k]));
    positions[piece].push_back(static_cast<int64_t>(k));
  }
  std::vector<PullRequest> pull(table_->num_ps());
  std::vector<std::vector<int>> lookup_piece(table_->num_ps());
  for (size_t i = 0; i < v->pieces.size(); ++i) {
    if (local[i].empty()) continue;
    const int p = v->pieces[i].ps;
    RowIds* lookup = pull[p].add_lookups();
    lookup->set_name(v->pieces[i].name);
    lookup->set_ids(EncodeRowIds(absl::MakeConstSpan(local[i])));
    lookup_piece[p].push_back(static_cast<int>(i));
  }
  Tensor out(RowsShape(*v, static_cast<int64_t>(ids.size())));
  Shape piece_shape = RowsShape(*v, 0);
  for (int p = 0; p < table_->num_ps(); ++p) {
    if (pull[p].lookups_size() == 0) continue;
    pull[p].set_job(closure_.job_id());
    *pull[p].mutable_lease() = LeaseKey();
    PullResponse response;
    if (absl::Status s = (*ps_)[p]->Pull(pull[p], &response); !s.ok()) return Cluster(s);
    if (response.rows_size() != pull[p].lookups_size()) {
      return Cluster(absl::InternalError(absl::StrCat("PS ", p, " answered ", response.rows_size(),
                                                      " lookups of ", pull[p].lookups_size())));
    }
    for (int l = 0; l < response.rows_size(); ++l) {
      const int piece = lookup_piece[p][l];
      piece_shape[0] = static_cast<int64_t>(local[piece].size());
      // A lookup answers [n, dim]: rows of a higher-rank variable come flat.
      ASSIGN_OR_RETURN(Tensor rows, DecodeTensor(response.rows(l).tensor()));
      if (rows.num_elements() != piece_shape[0] * v->row_elems) {
        return Cluster(absl::InternalError(absl::StrCat("PS ", p, " answered ", rows.num_elements(),
                                                        " values for ", piece_shape[0],
                                                        " rows of '", v->pieces[piece].name, "'")));
      }
      for (size_t r = 0; r < positions[piece].size(); ++r) {
        std::memcpy(out.data() + positions[piece][r] * v->row_elems,
                    rows.data() + static_cast<int64_t>(r) * v->row_elems,
                    v->row_elems * sizeof(float));
      }
    }
  }
  return out;
}

absl::Status FunctionContext::SendPushes(std::vector<PushRequest>* push) {
  std::vector<PushResponse>* pushed = &pushed_;
  pushed->resize(push->size());
  std::vector<std::unique_ptr<PendingPsCall>> calls(push->size());
  for (size_t p = 0; p < push->size(); ++p) {
    if ((*push)[p].gradients_size() == 0 && (*push)[p].sparse_size() == 0) continue;
    (*push)[p].set_job(closure_.job_id());
    calls[p] = (*ps_)[p]->StartPush((*push)[p], &(*pushed)[p]);
  }
  absl::Status first;
  for (auto& call : calls) {
    if (call == nullptr) continue;
    absl::Status s = call->Wait();
    if (first.ok() && !s.ok()) first = s;
  }
  if (!first.ok()) return Cluster(first);
  return absl::OkStatus();
}

namespace {

std::vector<FunctionContext::GradientView> Views(
    const std::vector<std::pair<std::string, Tensor>>& gradients) {
  std::vector<FunctionContext::GradientView> views;
  views.reserve(gradients.size());
  for (const auto& [name, gradient] : gradients) {
    views.push_back({name, gradient.shape(), gradient.values()});
  }
  return views;
}

}  // namespace

absl::StatusOr<std::vector<PushRequest>> FunctionContext::PushRequests(
    absl::Span<const GradientView> gradients) {
  std::vector<PushRequest> push(table_->num_ps());
  absl::flat_hash_set<std::string> seen;
  for (const GradientView& gradient : gradients) {
    const std::string& name = gradient.name;
    ASSIGN_OR_RETURN(const VariableTable::Variable* v, Lookup(*table_, name));
    RETURN_IF_ERROR(NotWhole(*v));
    if (!seen.insert(name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("variable '", name, "' is pushed twice in one step"));
    }
    if (gradient.shape != v->shape ||
        static_cast<int64_t>(gradient.values.size()) != NumElements(v->shape)) {
      return absl::InvalidArgumentError(
          absl::StrCat("the gradient of variable '", name, "' is ", ShapeString(gradient.shape),
                       ", not the variable's ", ShapeString(v->shape)));
    }
    for (const auto& piece : v->pieces) {
      Shape shape = v->shape;
      if (!shape.empty()) shape[0] = piece.rows;
      NamedTensor* g = push[piece.ps].add_gradients();
      g->set_name(piece.name);
      EncodeTensor(
          shape,
          gradient.values.subspan(piece.row_offset * v->row_elems, piece.rows * v->row_elems),
          g->mutable_tensor());
    }
  }
  ASSIGN_OR_RETURN(const UpdateKey key, NextStep());
  for (PushRequest& r : push) *r.mutable_update() = key;
  return push;
}

absl::Status FunctionContext::Push(const std::vector<std::pair<std::string, Tensor>>& gradients) {
  ASSIGN_OR_RETURN(std::vector<PushRequest> push, PushRequests(Views(gradients)));
  ++steps_;
  return SendPushes(&push);
}

absl::StatusOr<std::vector<Tensor>> FunctionContext::PushAndPull(
    const std::vector<std::pair<std::string, Tensor>>& gradients,
    const std::vector<std::string>& pull_names) {
  return PushAndPull(Views(gradients), pull_names);
}

absl::StatusOr<std::vector<Tensor>> FunctionContext::PushAndPull(
    absl::Span<const GradientView> gradients, const std::vector<std::string>& pull_names) {
  ASSIGN_OR_RETURN(std::vector<const VariableTable::Variable*> vars,
                   WholeVariables(*table_, pull_names));
  ASSIGN_OR_RETURN(std::vector<PushRequest> push, PushRequests(gradients));
  std::vector<PullRequest> pull(table_->num_ps());
  AddPulls(vars, &pull);
  // A PS with gradients answers its pull with the push; the others alone.
  std::vector<bool> fused(table_->num_ps(), false);
  for (int p = 0; p < table_->num_ps(); ++p) {
    PushRequest& r = push[p];
    if (pull[p].names_size() == 0 || (r.gradients_size() == 0 && r.sparse_size() == 0)) continue;
    pull[p].set_job(closure_.job_id());
    *r.mutable_pull() = std::move(pull[p]);
    fused[p] = true;
  }
  ++steps_;
  RETURN_IF_ERROR(SendPushes(&push));
  pulled_.resize(table_->num_ps());
  for (int p = 0; p < table_->num_ps(); ++p) {
    // The answer goes to pulled_, its buffers kept for the next push's.
    if (fused[p]) pulled_[p].Swap(pushed_[p].mutable_pulled());
  }
  RETURN_IF_ERROR(SendPulls(&pull, fused));
  return ReadPulls(vars);
}

absl::Status FunctionContext::PushRows(const std::string& variable, absl::Span<const int64_t> ids,
                                       const Tensor& row_gradients) {
  ASSIGN_OR_RETURN(const VariableTable::Variable* v, Lookup(*table_, variable));
  RETURN_IF_ERROR(CheckRows(*v, ids));
  const Shape expected = RowsShape(*v, static_cast<int64_t>(ids.size()));
  if (row_gradients.shape() != expected) {
    return absl::InvalidArgumentError(absl::StrCat("the row gradients of variable '", variable,
                                                   "' are ", ShapeString(row_gradients.shape()),
                                                   ", not ", ShapeString(expected)));
  }
  // The PS takes distinct ids: a repeated id's gradients are summed.
  absl::flat_hash_map<int64_t, int64_t> slot;
  std::vector<int64_t> unique;
  std::vector<float> summed;
  const int64_t width = v->row_elems;
  for (size_t k = 0; k < ids.size(); ++k) {
    auto [it, fresh] = slot.emplace(ids[k], static_cast<int64_t>(unique.size()));
    if (fresh) {
      unique.push_back(ids[k]);
      summed.resize(summed.size() + width, 0.0f);
    }
    const float* g = row_gradients.data() + static_cast<int64_t>(k) * width;
    float* out = summed.data() + it->second * width;
    for (int64_t e = 0; e < width; ++e) out[e] += g[e];
  }
  std::vector<std::vector<int64_t>> local(v->pieces.size());
  std::vector<std::vector<float>> rows(v->pieces.size());
  for (size_t u = 0; u < unique.size(); ++u) {
    const int piece = PieceOf(*v, unique[u]);
    local[piece].push_back(LocalId(*v, piece, unique[u]));
    rows[piece].insert(rows[piece].end(), summed.begin() + u * width,
                       summed.begin() + (u + 1) * width);
  }
  std::vector<PushRequest> push(table_->num_ps());
  for (size_t i = 0; i < v->pieces.size(); ++i) {
    if (local[i].empty()) continue;
    SparseGradient* g = push[v->pieces[i].ps].add_sparse();
    g->set_name(v->pieces[i].name);
    g->set_ids(EncodeRowIds(absl::MakeConstSpan(local[i])));
    EncodeTensor({static_cast<int64_t>(local[i].size()), width}, rows[i], g->mutable_rows());
  }
  ASSIGN_OR_RETURN(const UpdateKey key, NextStep());
  for (PushRequest& r : push) *r.mutable_update() = key;
  ++steps_;
  return SendPushes(&push);
}

}  // namespace pscluster
