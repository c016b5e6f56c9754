#include "client/checkpoint_params.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/checkpoint_verify.h"
#include "coordinator/core/checkpoint_manager.h"
#include "ps/core/in_process_ps_client.h"
#include "ps/core/variable_store.h"
#include "worker/core/param_router.h"

namespace pscluster {
namespace {

// Rows of a fixed vocabulary pulled per request: 16 Mi floats (64 MiB) at
// most, well under a store's max_variable_elements.
constexpr int64_t kPullElements = int64_t{1} << 24;

}  // namespace

RestoredCheckpoint::RestoredCheckpoint() = default;
RestoredCheckpoint::~RestoredCheckpoint() = default;

absl::StatusOr<std::unique_ptr<RestoredCheckpoint>> RestoredCheckpoint::Open(
    const std::string& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    return absl::NotFoundError(absl::StrCat("no checkpoint directory ", dir));
  }
  std::vector<CheckpointManifest> committed = CheckpointManager(dir, 1, "").List();
  if (committed.empty()) {
    return absl::NotFoundError(absl::StrCat("no committed checkpoint in ", dir));
  }
  // List() is newest first: the newest names the job and its PS count.
  const CheckpointManifest& newest = committed.front();
  std::unique_ptr<RestoredCheckpoint> out(new RestoredCheckpoint());
  absl::StatusOr<JobSpec> spec = CheckpointJobSpec(dir, newest.job_id(), &out->job_id_);
  if (!spec.ok()) return spec.status();
  out->spec_ = *std::move(spec);
  out->variables_ = ModelVariables(out->spec_);
  const int num_ps = std::max(newest.num_ps(), 1);
  absl::StatusOr<VariablePlan> plan =
      PlanVariables(out->variables_, out->spec_.partitioner, num_ps);
  if (!plan.ok()) return plan.status();
  out->plan_ = *std::move(plan);

  for (int i = 0; i < num_ps; ++i) {
    VariableStore::Options store_options;
    store_options.checkpoint_root = dir;
    out->stores_.push_back(std::make_unique<VariableStore>(store_options));
    out->clients_.push_back(std::make_unique<InProcessPsClient>(out->stores_.back().get()));
    out->ps_.push_back(out->clients_.back().get());
  }
  CheckpointManager manager(dir, /*keep=*/1, out->job_id_);
  absl::StatusOr<CheckpointManifest> restored = manager.RestoreLatest(out->plan_, out->ps_);
  if (!restored.ok()) return restored.status();
  out->checkpoint_id_ = restored->checkpoint_id();

  absl::StatusOr<std::unique_ptr<ParamRouter>> router =
      ParamRouter::Create(out->variables_, out->plan_.placement, num_ps);
  if (!router.ok()) return router.status();
  out->router_ = *std::move(router);
  return out;
}

absl::Status RestoredCheckpoint::Pull(bool with_dense,
                                      const std::vector<std::vector<uint64_t>>& unique_ids,
                                      std::vector<Tensor>* params, std::vector<Tensor>* rows) {
  RoutedStep step;
  if (absl::Status s = router_->PlanStep(with_dense, unique_ids, &step); !s.ok()) return s;
  std::vector<PullResponse> responses(ps_.size());
  for (size_t i = 0; i < ps_.size(); ++i) {
    if (!HasWork(step.pull[i])) continue;
    if (absl::Status s = ps_[i]->Pull(step.pull[i], &responses[i]); !s.ok()) return s;
  }
  std::vector<Tensor> no_params;  // ReadPull writes none without with_dense
  return router_->ReadPull(step, &responses, params != nullptr ? params : &no_params, rows);
}

absl::StatusOr<std::vector<Tensor>> RestoredCheckpoint::ReadDense() {
  // One pull of every whole-read variable, as a worker's step makes it.
  std::vector<Tensor> params(variables_.size());
  std::vector<Tensor> rows;
  const std::vector<std::vector<uint64_t>> no_ids(router_->num_tables());
  if (absl::Status s = Pull(/*with_dense=*/true, no_ids, &params, &rows); !s.ok()) return s;
  return params;
}

absl::StatusOr<std::vector<EmbeddingTable>> RestoredCheckpoint::ReadTables() {
  const int tables = router_->num_tables();
  std::vector<EmbeddingTable> out(tables);
  for (int t = 0; t < tables; ++t) {
    const CategoricalFeatureSpec& feature = spec_.model.categorical[t];
    const VariableSpecProto& var = variables_[router_->table_variable(t)];
    EmbeddingTable& table = out[t];
    table.feature = feature.name;
    table.hashed = var.kind() == HASH_TABLE;
    table.dim = router_->row_width(t);
    if (!table.hashed) {
      // All rows, through the router: a partitioned table's row shards come
      // back in place, as a worker reads them.
      const int64_t vocab = var.shape(0);
      table.values = Tensor(Shape{vocab, table.dim});
      const int64_t chunk = std::max<int64_t>(1, kPullElements / std::max<int64_t>(table.dim, 1));
      std::vector<std::vector<uint64_t>> ids(tables);
      for (int64_t first = 0; first < vocab; first += chunk) {
        const int64_t n = std::min(chunk, vocab - first);
        ids[t].resize(n);
        std::iota(ids[t].begin(), ids[t].end(), static_cast<uint64_t>(first));
        std::vector<Tensor> rows;
        if (absl::Status s = Pull(/*with_dense=*/false, ids, nullptr, &rows); !s.ok()) return s;
        std::memcpy(table.values.data() + first * table.dim, rows[t].data(),
                    sizeof(float) * n * table.dim);
      }
      continue;
    }
    // Every shard's keys and rows, straight from the stores (a lookup would
    // need the keys first, and would create missing rows).
    std::vector<uint64_t> keys;
    std::vector<float> values;
    for (const ShardProto& shard : plan_.placement[router_->table_variable(t)].shards()) {
      std::vector<uint64_t> k;
      std::vector<float> v;
      if (absl::Status s = stores_[shard.ps_index()]->ReadTable(shard.name(), &k, &v); !s.ok()) {
        return s;
      }
      keys.insert(keys.end(), k.begin(), k.end());
      values.insert(values.end(), v.begin(), v.end());
    }
    // Ascending keys: the same file whatever the PS count or touch order.
    std::vector<size_t> order(keys.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return keys[a] < keys[b]; });
    const int64_t n = static_cast<int64_t>(keys.size());
    table.keys.resize(n);
    table.values = Tensor(Shape{n, table.dim});
    for (int64_t i = 0; i < n; ++i) {
      table.keys[i] = keys[order[i]];
      std::memcpy(table.values.data() + i * table.dim, values.data() + order[i] * table.dim,
                  sizeof(float) * table.dim);
    }
  }
  return out;
}

absl::StatusOr<int64_t> RestoredCheckpoint::HashRows() {
  int64_t rows = 0;
  for (const std::unique_ptr<VariableStore>& store : stores_) {
    StatsResponse stats;
    if (absl::Status s = store->Stats(StatsRequest(), &stats); !s.ok()) return s;
    for (const VariableStats& v : stats.variables()) {
      if (v.kind() == HASH_TABLE) rows += v.rows();
    }
  }
  return rows;
}

absl::Status RestoredCheckpoint::Lookup(const std::vector<std::vector<uint64_t>>& unique_ids,
                                        std::vector<Tensor>* rows, int64_t* created) {
  absl::StatusOr<int64_t> before = HashRows();
  if (!before.ok()) return before.status();
  if (absl::Status s = Pull(/*with_dense=*/false, unique_ids, nullptr, rows); !s.ok()) return s;
  absl::StatusOr<int64_t> after = HashRows();
  if (!after.ok()) return after.status();
  if (created != nullptr) *created = *after - *before;
  return absl::OkStatus();
}

absl::StatusOr<CheckpointParams> LoadCheckpointParams(const std::string& dir) {
  absl::StatusOr<std::unique_ptr<RestoredCheckpoint>> ckpt = RestoredCheckpoint::Open(dir);
  if (!ckpt.ok()) return ckpt.status();
  CheckpointParams out;
  // The tables first: nothing has been looked up yet.
  absl::StatusOr<std::vector<EmbeddingTable>> tables = (*ckpt)->ReadTables();
  if (!tables.ok()) return tables.status();
  absl::StatusOr<std::vector<Tensor>> params = (*ckpt)->ReadDense();
  if (!params.ok()) return params.status();
  out.spec = (*ckpt)->spec();
  out.job_id = (*ckpt)->job_id();
  out.checkpoint_id = (*ckpt)->checkpoint_id();
  out.variables = (*ckpt)->variables();
  out.params = *std::move(params);
  out.tables = *std::move(tables);
  return out;
}

}  // namespace pscluster
