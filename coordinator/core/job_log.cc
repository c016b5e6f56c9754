#include "coordinator/core/job_log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace pscluster {
namespace {

uint32_t Crc(const std::string& bytes) {
  return static_cast<uint32_t>(
      crc32(0L, reinterpret_cast<const Bytef*>(bytes.data()), static_cast<uInt>(bytes.size())));
}

void PutU32(uint32_t v, std::string* out) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint32_t GetU32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<uint8_t>(p[i])) << (8 * i);
  return v;
}

absl::Status WriteAll(int fd, const std::string& data, const std::string& path) {
  const char* p = data.data();
  size_t left = data.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return absl::UnavailableError(absl::StrCat("cannot write ", path, ": ", std::strerror(errno)));
    p += n;
    left -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

void SyncDirectory(const std::string& path) {
  const std::string dir = std::filesystem::path(path).parent_path().string();
  const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<JobLog>> JobLog::Open(const std::string& path) {
  std::error_code ec;
  const auto parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat("cannot open job log ", path, ": ", std::strerror(errno)));
  }
  SyncDirectory(path);
  return std::unique_ptr<JobLog>(new JobLog(path, fd));
}

JobLog::~JobLog() {
  absl::MutexLock lock(&mu_);
  ::close(fd_);
}

absl::Status JobLog::Append(const JobLogRecord& record) {
  const std::string bytes = record.SerializeAsString();
  std::string frame;
  PutU32(static_cast<uint32_t>(bytes.size()), &frame);
  PutU32(Crc(bytes), &frame);
  frame += bytes;
  absl::MutexLock lock(&mu_);
  if (absl::Status s = WriteAll(fd_, frame, path_); !s.ok()) return s;
  if (::fsync(fd_) != 0) {
    return absl::UnavailableError(absl::StrCat("cannot fsync ", path_, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<JobLogRecord>> ReadJobLog(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("no job log at ", path));
  std::stringstream buf;
  buf << in.rdbuf();
  const std::string data = buf.str();
  std::vector<JobLogRecord> records;
  size_t pos = 0;
  while (pos + 8 <= data.size()) {
    const uint32_t length = GetU32(data.data() + pos);
    const uint32_t crc = GetU32(data.data() + pos + 4);
    if (pos + 8 + length > data.size()) break;  // torn tail
    const std::string bytes = data.substr(pos + 8, length);
    JobLogRecord record;
    if (Crc(bytes) != crc || !record.ParseFromString(bytes)) break;  // corrupt tail
    records.push_back(std::move(record));
    pos += 8 + length;
  }
  return records;
}

absl::Status WriteFileDurably(const std::string& path, const std::string& data) {
  const std::string tmp = absl::StrCat(path, ".tmp.", ::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("cannot create ", tmp, ": ", std::strerror(errno)));
  absl::Status s = WriteAll(fd, data, tmp);
  if (s.ok() && ::fsync(fd) != 0) {
    s = absl::UnavailableError(absl::StrCat("cannot fsync ", tmp, ": ", std::strerror(errno)));
  }
  ::close(fd);
  if (s.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    s = absl::UnavailableError(absl::StrCat("cannot rename ", tmp, " to ", path, ": ", std::strerror(errno)));
  }
  if (!s.ok()) {
    ::unlink(tmp.c_str());
    return s;
  }
  SyncDirectory(path);
  return absl::OkStatus();
}

}  // namespace pscluster
