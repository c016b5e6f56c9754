// JobStoresMetrics: what a PS task holds, as Prometheus gauges computed at
// scrape time from JobStores::Stats:
//   pscluster_ps_jobs                                   job namespaces held
//   pscluster_ps_held_bytes{kind="parameters|slots"}    over all jobs
//   pscluster_ps_variable_bytes{variable,kind}          per variable (table)
//                                                       name, summed over jobs
//   pscluster_ps_memory_limit_bytes                     --max_memory_bytes, the
//                                                       most held_bytes may reach
//                                                       (absent without a limit)
// No job id is a label (jobs come and go; variable names are the model's).
// Thread-safe.
#ifndef PSCLUSTER_PS_CORE_JOB_STORES_METRICS_H_
#define PSCLUSTER_PS_CORE_JOB_STORES_METRICS_H_

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include <vector>

#include "ps/core/job_stores.h"

namespace pscluster {

class JobStoresMetrics : public prometheus::Collectable {
 public:
  // `jobs` is not owned and must outlive this collectable (and the metrics
  // endpoint it is registered on).
  explicit JobStoresMetrics(JobStores* jobs) : jobs_(jobs) {}

  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  JobStores* const jobs_;
};

}  // namespace pscluster

#endif  // PSCLUSTER_PS_CORE_JOB_STORES_METRICS_H_
