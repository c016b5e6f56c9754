// JobRunner::Describe: the variable layout and what each PS holds.
#include <map>

#include "absl/strings/str_cat.h"
#include "common/lr_schedule.h"
#include "coordinator/core/job_runner.h"

namespace pscluster {

absl::StatusOr<DescribeJobResponse> JobRunner::Describe() const {
  {
    absl::MutexLock lock(&mu_);
    // An ended job's variables are gone from the PS: what they held at its end.
    if (final_describe_.has_value()) return *final_describe_;
    if (!variables_ready_) {
      return absl::FailedPreconditionError(
          absl::StrCat("job '", job_id_, "' has not created its variables yet"));
    }
  }
  // plan_ and ps_ are written before variables_ready_ is set, and after
  // only by a rescale, under layout_mu_.
  absl::ReaderMutexLock layout(&layout_mu_);
  const std::vector<VariableSpecProto> vars = ModelVariables(spec_);
  const std::vector<VariablePlacementProto>& placement = plan_.placement;
  if (placement.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("job '", job_id_, "' has not created its variables yet"));
  }
  DescribeJobResponse out;
  out.set_job_id(job_id_);
  // The replicas as formed now (a synchronous job re-forms them when
  // workers join or leave; PhaseRunner::FormReplicas keeps the status).
  board_.Read([&](const JobStatusProto& s) {
    out.set_per_replica_batch(s.per_replica_batch());
    out.set_replicas(s.replicas());
  });
  out.set_global_batch(spec_.data.global_batch);
  out.set_learning_rate(DescribeLearningRate(spec_.optimizer));
  // What each PS holds, by concrete (shard) name.
  std::map<std::string, VariableStats> held;
  for (size_t p = 0; p < ps_.size(); ++p) {
    StatsResponse stats;
    StatsRequest request;
    request.set_job(job_id_);
    absl::Status s = ps_[p]->Stats(request, &stats);
    if (!s.ok()) {
      return absl::Status(s.code(), absl::StrCat("stats of PS ", p, ": ", s.message()));
    }
    PsLoad* load = out.add_ps();
    load->set_ps_index(static_cast<int>(p));
    load->set_address(p < options_.ps_addresses.size() ? options_.ps_addresses[p] : "in-process");
    load->set_applied_steps(stats.applied_steps());
    load->set_duplicate_steps(stats.duplicate_steps());
    load->set_held_keys(stats.held_keys());
    for (const VariableStats& v : stats.variables()) {
      load->set_parameter_bytes(load->parameter_bytes() + v.parameter_bytes());
      load->set_slot_bytes(load->slot_bytes() + v.slot_bytes());
      load->set_variables(load->variables() + 1);
      held[v.name()] = v;
    }
  }
  for (size_t i = 0; i < vars.size() && i < placement.size(); ++i) {
    const VariableSpecProto& var = vars[i];
    VariableLayout* layout = out.add_variables();
    layout->set_name(var.name());
    layout->set_kind(var.kind() == HASH_TABLE ? "hash_table"
                     : IsRowAccessed(var)     ? "embedding"
                                              : "dense");
    if (var.kind() == HASH_TABLE) layout->add_shape(-1);
    for (int64_t d : var.shape()) layout->add_shape(d);
    layout->set_partitioner(DescribePlacement(var, placement[i]));
    auto add_shard = [&](const std::string& name, int ps_index, int64_t offset, int64_t rows) {
      ShardLayoutProto* shard = layout->add_shards();
      shard->set_name(name);
      shard->set_ps_index(ps_index);
      shard->set_row_offset(offset);
      shard->set_rows(rows);
      auto it = held.find(name);
      if (it != held.end()) {
        if (var.kind() == HASH_TABLE) shard->set_rows(it->second.rows());
        shard->set_parameter_bytes(it->second.parameter_bytes());
        shard->set_slot_bytes(it->second.slot_bytes());
        shard->set_evictions(it->second.evictions());
      }
    };
    if (placement[i].shards_size() == 0) {
      add_shard(var.name(), placement[i].ps_index(), 0, var.shape_size() > 0 ? var.shape(0) : 1);
    }
    for (const ShardProto& s : placement[i].shards()) {
      add_shard(s.name(), s.ps_index(), s.row_offset(), s.rows());
    }
  }
  return out;
}

}  // namespace pscluster
