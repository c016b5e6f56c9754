#include "common/checkpoint_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace pscluster {
namespace {

absl::Status IoError(int error, const std::string& what, const std::string& path) {
  return absl::Status(absl::ErrnoToStatusCode(error),
                      absl::StrCat("checkpoint file ", path, ": ", what, ": ", std::strerror(error)));
}

absl::Status DataLoss(const std::string& path, const std::string& what) {
  return absl::DataLossError(absl::StrCat("checkpoint file ", path, ": ", what));
}

void EncodeLength(uint64_t n, unsigned char out[8]) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<unsigned char>(n >> (8 * i));
}

uint64_t DecodeLength(const unsigned char in[8]) {
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t{in[i]} << (8 * i);
  return n;
}

std::string Directory(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

absl::Status FsyncDirectory(const std::string& path) {
  const std::string dir = Directory(path);
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return IoError(errno, "open directory " + dir, path);
  const int rc = ::fsync(fd);
  const int error = errno;
  ::close(fd);
  if (rc != 0) return IoError(error, "fsync directory " + dir, path);
  return absl::OkStatus();
}

absl::Status AlreadyExists(const std::string& path) {
  return absl::AlreadyExistsError(
      absl::StrCat("checkpoint file ", path, " exists: a committed file is never replaced"));
}

// Renames `from` to `to` unless `to` exists (ALREADY_EXISTS then).
absl::Status RenameNoReplace(const std::string& from, const std::string& to) {
  if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) == 0) {
    return absl::OkStatus();
  }
  if (errno == EEXIST) return AlreadyExists(to);
  if (errno != EINVAL && errno != ENOSYS) return IoError(errno, "rename " + from, to);
  // A file system without RENAME_NOREPLACE: link fails if `to` exists.
  if (::link(from.c_str(), to.c_str()) != 0) {
    if (errno == EEXIST) return AlreadyExists(to);
    return IoError(errno, "link " + from, to);
  }
  ::unlink(from.c_str());
  return absl::OkStatus();
}

}  // namespace

std::string ChecksumHex(uint64_t hash) { return absl::StrFormat("%016x", hash); }

absl::StatusOr<std::unique_ptr<CheckpointFileWriter>> CheckpointFileWriter::Create(
    const std::string& path, Existing existing) {
  if (path.empty()) return absl::InvalidArgumentError("checkpoint file: empty path");
  if (existing == Existing::kRefuse && ::access(path.c_str(), F_OK) == 0) {
    return AlreadyExists(path);
  }
  std::string temp = absl::StrCat(path, ".tmp.", ::getpid());
  std::FILE* file = std::fopen(temp.c_str(), "wb");
  if (file == nullptr) return IoError(errno, "create " + temp, path);
  return std::unique_ptr<CheckpointFileWriter>(
      new CheckpointFileWriter(path, std::move(temp), file, existing));
}

CheckpointFileWriter::CheckpointFileWriter(std::string path, std::string temp_path,
                                           std::FILE* file, Existing existing)
    : path_(std::move(path)), temp_path_(std::move(temp_path)), file_(file),
      hash_(XXH3_createState()), existing_(existing) {
  XXH3_64bits_reset(hash_);
}

CheckpointFileWriter::~CheckpointFileWriter() {
  if (file_ != nullptr) std::fclose(file_);
  if (!committed_) std::remove(temp_path_.c_str());
  XXH3_freeState(hash_);
}

absl::Status CheckpointFileWriter::Write(const void* data, size_t size) {
  if (size == 0) return absl::OkStatus();
  if (std::fwrite(data, 1, size, file_) != size) {
    status_ = IoError(errno, "write " + temp_path_, path_);
    return status_;
  }
  XXH3_64bits_update(hash_, data, size);
  bytes_ += size;
  return absl::OkStatus();
}

absl::Status CheckpointFileWriter::Append(absl::string_view record) {
  if (!status_.ok()) return status_;
  if (file_ == nullptr) return absl::FailedPreconditionError("checkpoint file: already committed");
  unsigned char length[8];
  EncodeLength(record.size(), length);
  if (absl::Status s = Write(length, sizeof(length)); !s.ok()) return s;
  return Write(record.data(), record.size());
}

absl::StatusOr<CheckpointFile> CheckpointFileWriter::Commit() {
  if (!status_.ok()) return status_;
  if (file_ == nullptr) return absl::FailedPreconditionError("checkpoint file: already committed");
  std::FILE* file = std::exchange(file_, nullptr);
  if (std::fflush(file) != 0 || ::fsync(::fileno(file)) != 0) {
    status_ = IoError(errno, "fsync " + temp_path_, path_);
    std::fclose(file);
    return status_;
  }
  if (std::fclose(file) != 0) {
    status_ = IoError(errno, "close " + temp_path_, path_);
    return status_;
  }
  if (existing_ == Existing::kRefuse) {
    if (absl::Status s = RenameNoReplace(temp_path_, path_); !s.ok()) {
      status_ = s;
      return status_;
    }
  } else if (std::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    status_ = IoError(errno, "rename " + temp_path_, path_);
    return status_;
  }
  committed_ = true;
  if (absl::Status s = FsyncDirectory(path_); !s.ok()) return s;
  CheckpointFile out;
  out.set_name(path_);
  out.set_bytes(static_cast<int64_t>(bytes_));
  out.set_checksum(ChecksumHex(XXH3_64bits_digest(hash_)));
  return out;
}

absl::StatusOr<CheckpointFile> WriteFileAtomically(const std::string& path,
                                                   absl::string_view contents) {
  auto writer = CheckpointFileWriter::Create(path);
  if (!writer.ok()) return writer.status();
  // Raw contents, not a framed record.
  if (absl::Status s = (*writer)->Write(contents.data(), contents.size()); !s.ok()) return s;
  return (*writer)->Commit();
}

absl::Status VerifyCheckpointFile(const std::string& path, const CheckpointFile& file) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return IoError(errno, "open", path);
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  std::vector<char> buffer(1 << 20);
  uint64_t bytes = 0;
  size_t n;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), f)) > 0) {
    XXH3_64bits_update(state, buffer.data(), n);
    bytes += n;
  }
  const bool failed = std::ferror(f) != 0;
  const int error = errno;
  std::fclose(f);
  const uint64_t hash = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  if (failed) return IoError(error, "read", path);
  if (file.bytes() < 0 || bytes != static_cast<uint64_t>(file.bytes())) {
    return DataLoss(path, absl::StrCat("size is ", bytes, " bytes, expected ", file.bytes()));
  }
  const std::string checksum = ChecksumHex(hash);
  if (checksum != file.checksum()) {
    return DataLoss(path,
                    absl::StrCat("checksum is ", checksum, ", expected '", file.checksum(), "'"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<CheckpointFileReader>> CheckpointFileReader::Open(
    const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) return IoError(errno, "open", path);
  struct stat st;
  if (::fstat(::fileno(file), &st) != 0) {
    const int error = errno;
    std::fclose(file);
    return IoError(error, "stat", path);
  }
  return std::unique_ptr<CheckpointFileReader>(
      new CheckpointFileReader(path, file, static_cast<uint64_t>(st.st_size)));
}

CheckpointFileReader::CheckpointFileReader(std::string path, std::FILE* file, uint64_t size)
    : path_(std::move(path)), file_(file), size_(size) {}

CheckpointFileReader::~CheckpointFileReader() { std::fclose(file_); }

absl::StatusOr<bool> CheckpointFileReader::Next(std::string* record) {
  if (offset_ == size_) return false;
  unsigned char length_bytes[8];
  if (size_ - offset_ < sizeof(length_bytes) ||
      std::fread(length_bytes, 1, sizeof(length_bytes), file_) != sizeof(length_bytes)) {
    return DataLoss(path_, absl::StrCat("torn record header at offset ", offset_));
  }
  offset_ += sizeof(length_bytes);
  const uint64_t length = DecodeLength(length_bytes);
  if (length > kMaxCheckpointRecordBytes || length > size_ - offset_) {
    return DataLoss(path_, absl::StrCat("record at offset ", offset_ - 8, " claims ", length,
                                        " bytes, ", size_ - offset_, " left in the file"));
  }
  record->resize(length);
  if (std::fread(record->data(), 1, length, file_) != length) {
    return DataLoss(path_, absl::StrCat("short read of the record at offset ", offset_ - 8));
  }
  offset_ += length;
  return true;
}

}  // namespace pscluster
