#include "ps/core/job_stores_metrics.h"

#include <map>
#include <string>
#include <utility>

namespace pscluster {
namespace {

prometheus::ClientMetric Gauge(double value, std::vector<prometheus::ClientMetric::Label> labels) {
  prometheus::ClientMetric m;
  m.label = std::move(labels);
  m.gauge.value = value;
  return m;
}

}  // namespace

std::vector<prometheus::MetricFamily> JobStoresMetrics::Collect() const {
  StatsResponse all;  // the process's: every job held
  if (!jobs_->LocalStats("", &all).ok()) return {};
  // variable name -> (parameter bytes, slot bytes), over every job.
  std::map<std::string, std::pair<int64_t, int64_t>> by_variable;
  int64_t parameters = 0, slots = 0;
  for (const std::string& job : all.jobs()) {
    StatsResponse response;
    if (!jobs_->LocalStats(job, &response).ok()) continue;  // ended meanwhile
    for (const VariableStats& v : response.variables()) {
      by_variable[v.name()].first += v.parameter_bytes();
      by_variable[v.name()].second += v.slot_bytes();
      parameters += v.parameter_bytes();
      slots += v.slot_bytes();
    }
  }
  std::vector<prometheus::MetricFamily> out(3);
  out[0].name = "pscluster_ps_jobs";
  out[0].help = "Job namespaces this PS holds.";
  out[0].type = prometheus::MetricType::Gauge;
  out[0].metric.push_back(Gauge(static_cast<double>(all.jobs_size()), {}));
  out[1].name = "pscluster_ps_held_bytes";
  out[1].help = "Bytes of parameters and of optimizer slots this PS holds, over all jobs.";
  out[1].type = prometheus::MetricType::Gauge;
  out[1].metric.push_back(Gauge(static_cast<double>(parameters), {{"kind", "parameters"}}));
  out[1].metric.push_back(Gauge(static_cast<double>(slots), {{"kind", "slots"}}));
  out[2].name = "pscluster_ps_variable_bytes";
  out[2].help = "Bytes this PS holds per variable (or table) name, summed over jobs.";
  out[2].type = prometheus::MetricType::Gauge;
  for (const auto& [name, bytes] : by_variable) {
    out[2].metric.push_back(
        Gauge(static_cast<double>(bytes.first), {{"kind", "parameters"}, {"variable", name}}));
    out[2].metric.push_back(
        Gauge(static_cast<double>(bytes.second), {{"kind", "slots"}, {"variable", name}}));
  }
  const MemoryBudget* budget = jobs_->memory_budget();
  if (budget != nullptr && budget->limit() > 0) {
    prometheus::MetricFamily limit;
    limit.name = "pscluster_ps_memory_limit_bytes";
    limit.help =
        "Most bytes of parameters plus optimizer slots this PS holds over all jobs "
        "(--max_memory_bytes); requests past it are refused.";
    limit.type = prometheus::MetricType::Gauge;
    limit.metric.push_back(Gauge(static_cast<double>(budget->limit()), {}));
    out.push_back(std::move(limit));
  }
  return out;
}

}  // namespace pscluster
