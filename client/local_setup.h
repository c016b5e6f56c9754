// What psctl's local runs (`psctl local`, `psctl predict`) share before their
// cluster starts: the run directory and the LocalClusterOptions their flags
// ask for, with the server binaries found.
//
// Thread-compatible.
#ifndef PSCLUSTER_CLIENT_LOCAL_SETUP_H_
#define PSCLUSTER_CLIENT_LOCAL_SETUP_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/local_cluster.h"
#include "client/local_run_options.h"

namespace pscluster {

// The run directory: the one asked for (created, never removed), or a fresh
// /tmp/psctl-XXXXXX removed when this goes away unless `keep` or Keep().
class RunDir {
 public:
  // INVALID_ARGUMENT naming --run_dir when it cannot be created; INTERNAL
  // when no temporary directory can be made.
  static absl::StatusOr<std::unique_ptr<RunDir>> Create(const std::string& requested, bool keep);
  ~RunDir();
  RunDir(const RunDir&) = delete;
  RunDir& operator=(const RunDir&) = delete;

  const std::string& path() const { return path_; }
  // Whether the destructor would remove the directory.
  bool removes() const { return remove_; }
  void Keep() { remove_ = false; }

 private:
  RunDir(std::string path, bool remove) : path_(std::move(path)), remove_(remove) {}
  std::string path_;
  bool remove_;
};

// The cluster `options` asks for, with `num_ps` PS (the job's strategy may
// need none) and every server binary resolved (ResolveServerBinary). Each
// worker gets --compute_threads: its share of this machine's cores, split
// again over its `replicas_per_worker` concurrent replicas, so that idle
// BLAS threads do not spin on cores another process needs. NOT_FOUND
// naming a binary that is missing (and its flag). run_dir is left empty.
absl::StatusOr<LocalClusterOptions> LocalClusterOptionsFor(const LocalRunOptions& options,
                                                           int num_ps, int replicas_per_worker);

}  // namespace pscluster

#endif  // PSCLUSTER_CLIENT_LOCAL_SETUP_H_
