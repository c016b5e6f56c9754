// Reader for the IDX file format used by MNIST and Fashion-MNIST.
//
// An IDX file is a big-endian header (a magic number whose low byte is the
// number of dimensions and whose third byte is the element type, then one
// uint32 per dimension) followed by the elements. pscluster reads two kinds,
// both of uint8 elements:
//   0x00000803  images: dims (count, rows, cols), pixels row-major per image
//   0x00000801  labels: dims (count)
// Files may be gzipped or plain; zlib's gzread reads both transparently.
//
// Thread-safety: the functions are stateless and safe to call concurrently.
#ifndef PSCLUSTER_COMMON_IDX_READER_H_
#define PSCLUSTER_COMMON_IDX_READER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace pscluster {

// A block of uint8 images as stored in an IDX file.
struct IdxImages {
  int64_t count = 0;
  int64_t rows = 0;
  int64_t cols = 0;
  // count * rows * cols bytes: image i's pixel (r, c) is at
  // pixels[(i * rows + r) * cols + c].
  std::vector<uint8_t> pixels;
};

// Reads the first `limit` images of the IDX image file at `path` (all of them
// when `limit` is 0 or exceeds the file's count).
// Returns:
//   NOT_FOUND         "cannot open data file 'PATH': <strerror>"
//   INVALID_ARGUMENT  naming PATH, for a wrong magic number, absurd dimensions,
//                     a negative limit, or a file shorter than its header says.
absl::StatusOr<IdxImages> ReadIdxImages(const std::string& path, int64_t limit);

// Reads the first `limit` labels of the IDX label file at `path` (all when
// `limit` is 0 or exceeds the count). Same errors as ReadIdxImages.
absl::StatusOr<std::vector<uint8_t>> ReadIdxLabels(const std::string& path, int64_t limit);

}  // namespace pscluster

#endif  // PSCLUSTER_COMMON_IDX_READER_H_
