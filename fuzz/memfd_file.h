// MemFile: fuzz input bytes as a file path, for readers that only take a path
// (common/idx_reader.h, common/csv_reader.h). The bytes live in an anonymous
// memory file (memfd_create) named by "/proc/self/fd/N": nothing is written
// to disk or into the repository, and the file goes away with the object.
// Linux only, like the rest of pscluster. Not thread-safe (one per thread).
#ifndef PSCLUSTER_FUZZ_MEMFD_FILE_H_
#define PSCLUSTER_FUZZ_MEMFD_FILE_H_

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz/fuzz_check.h"

namespace pscluster {
namespace fuzz {

class MemFile {
 public:
  MemFile(const void* data, size_t size) : fd_(memfd_create("pscluster_fuzz", MFD_CLOEXEC)) {
    FUZZ_CHECK(fd_ >= 0, "memfd_create failed");
    const char* p = static_cast<const char*>(data);
    while (size > 0) {
      const ssize_t n = write(fd_, p, size);
      FUZZ_CHECK(n > 0, "writing the memory file failed");
      p += n;
      size -= static_cast<size_t>(n);
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~MemFile() { close(fd_); }
  MemFile(const MemFile&) = delete;
  MemFile& operator=(const MemFile&) = delete;

  // Opening this path opens the file afresh, from its first byte.
  const std::string& path() const { return path_; }

 private:
  int fd_;
  std::string path_;
};

}  // namespace fuzz
}  // namespace pscluster

#endif  // PSCLUSTER_FUZZ_MEMFD_FILE_H_
