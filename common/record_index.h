// Indexes of record files for streaming input (docs/streaming_input.md):
// how many records a file holds and where every `interval`-th one starts,
// so that a job's epochs can be planned as record ranges of files and a
// worker can seek to a range instead of reading from the file's start.
//
// Records are numbered as worker/core/record_stream.h reads them:
//  - lines (CSV/TSV, plain or gzip): every line is a record (a blank one
//    too; a last line without '\n' if it is not empty); a header line is
//    not. Offsets are positions in the uncompressed text.
//  - tfrecord: every record; the index walks the length headers (checking
//    their CRCs) and seeks past the data, whose CRCs the reader checks.
//
// Thread-safety: the functions are stateless and safe to call concurrently.
#ifndef PSCLUSTER_COMMON_RECORD_INDEX_H_
#define PSCLUSTER_COMMON_RECORD_INDEX_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace pscluster {

struct RecordFileIndex {
  std::string path;
  int64_t bytes = 0;    // the file's size on disk
  int64_t records = 0;  // records before `tail`, if it is an error
  bool gzip = false;    // a gzip file (it cannot seek)
  // offsets[k]: where record k * interval starts (for k * interval <
  // records).
  int64_t interval = 0;
  std::vector<int64_t> offsets;
  // OK, or DATA_LOSS naming the file and byte offset past which nothing can
  // be read (a TFRecord whose framing is lost, a truncated gzip stream).
  absl::Status tail;
};

// Indexes `path` (lines, or TFRecord when `tfrecord`), with `header` (lines:
// the first line is a header). REQUIRES: interval > 0.
// NOT_FOUND "data file PATH: cannot open: <strerror>".
absl::StatusOr<RecordFileIndex> IndexRecordFile(const std::string& path, bool tfrecord,
                                                bool header, int64_t interval);

// `patterns` expanded as globs (`*`, `?`, `[...]`), each pattern's matches
// in sorted order, in the patterns' order; a pattern without wildcards
// stands for itself. NOT_FOUND names a pattern that matches no file.
absl::StatusOr<std::vector<std::string>> ExpandDataGlobs(const std::vector<std::string>& patterns);

}  // namespace pscluster

#endif  // PSCLUSTER_COMMON_RECORD_INDEX_H_
