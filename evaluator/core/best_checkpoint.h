// The best checkpoint so far, kept by the sidecar evaluator (eval.keep_best in
// the job spec): a copy of one committed checkpoint in
// <checkpoint dir>/best/, laid out as a checkpoint directory of its own so
// that `psctl checkpoint verify`, `psctl export` and a job's restore read it
// as they read the job's directory:
//
//   best/ckpt-<id>/MANIFEST, best/ckpt-<id>/ps-<i>.data   (hard links, or
//                                                          copies across
//                                                          file systems)
//   best/joblog                                           (a copy: the spec)
//   best/BEST                                             (BestRecord, text)
//
// The coordinator's pruning never touches it (it deletes ckpt-<id> entries
// of the job's directory only), and hard links keep the files alive after
// the job deletes the original.
//
// Replacing it is atomic: the new copy is built in <checkpoint dir>/.best.tmp
// and exchanged with best/ in one renameat2(RENAME_EXCHANGE) (a plain rename
// the first time), so a reader or a crash sees the old best or the new one,
// never a mix; what is left of an interrupted build is removed by the next.
//
// Free functions; one evaluator per checkpoint directory (not thread-safe for
// the same directory).
#ifndef PSCLUSTER_EVALUATOR_CORE_BEST_CHECKPOINT_H_
#define PSCLUSTER_EVALUATOR_CORE_BEST_CHECKPOINT_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "protos/checkpoint.pb.h"

namespace pscluster {

struct BestRecord {
  int64_t checkpoint_id = -1;
  int64_t step = 0;       // the checkpoint's global step
  std::string metric;     // "loss", "accuracy" or "auc"
  bool maximize = false;  // keep_best.mode: max
  double value = 0;       // the metric's value at the checkpoint
};

// <checkpoint_dir>/best.
std::string BestDir(const std::string& checkpoint_dir);

// Whether `value` is better than `best` (strictly: a tie keeps the older).
inline bool IsBetter(double value, double best, bool maximize) {
  return maximize ? value > best : value < best;
}

// Makes <checkpoint_dir>/best/ a copy of committed checkpoint `manifest`
// (which lies in <checkpoint_dir>/ckpt-<id>/) with `record`. NOT_FOUND when
// a data file of the checkpoint is gone (the job pruned it meanwhile): best/
// is then left as it was. Other file-system errors with the errno's code,
// naming the path.
absl::Status KeepBestCheckpoint(const std::string& checkpoint_dir,
                                const CheckpointManifest& manifest, const BestRecord& record);

// The record of <checkpoint_dir>/best/BEST. NOT_FOUND when there is none;
// DATA_LOSS for a malformed one.
absl::StatusOr<BestRecord> ReadBestRecord(const std::string& checkpoint_dir);

}  // namespace pscluster

#endif  // PSCLUSTER_EVALUATOR_CORE_BEST_CHECKPOINT_H_
