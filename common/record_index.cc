#include "common/record_index.h"

#include <glob.h>
#include <sys/stat.h>
#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/tfrecord.h"

namespace pscluster {
namespace {

absl::Status CannotOpen(const std::string& path) {
  return absl::NotFoundError(
      absl::StrCat("data file ", path, ": cannot open: ", std::strerror(errno)));
}

bool IsGzip(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rbe");
  if (f == nullptr) return false;
  unsigned char magic[2] = {0, 0};
  const size_t n = std::fread(magic, 1, 2, f);
  std::fclose(f);
  return n == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
}

absl::Status IndexLines(bool header, RecordFileIndex* index) {
  gzFile gz = gzopen(index->path.c_str(), "rb");
  if (gz == nullptr) return CannotOpen(index->path);
  gzbuffer(gz, 256 << 10);
  std::unique_ptr<gzFile_s, int (*)(gzFile)> closer(gz, gzclose);
  std::vector<char> buffer(256 << 10);
  int64_t position = 0;       // uncompressed bytes so far
  bool at_line_start = true;  // position starts a line
  bool in_header = header;
  for (;;) {
    const int n = gzread(gz, buffer.data(), static_cast<unsigned>(buffer.size()));
    if (n < 0) {
      int code = 0;
      index->tail = absl::DataLossError(absl::StrCat("file ", index->path, ", at byte ", position,
                                                     " of its text: unreadable (",
                                                     gzerror(gz, &code), ")"));
      break;
    }
    if (n == 0) {
      int code = 0;
      const char* message = gzerror(gz, &code);
      if (code != Z_OK && code != Z_STREAM_END) {
        index->tail = absl::DataLossError(absl::StrCat("file ", index->path, ", at byte ",
                                                       position, " of its text: truncated or "
                                                       "corrupt (", message, ")"));
      }
      break;
    }
    for (int i = 0; i < n; ++i, ++position) {
      if (at_line_start && !in_header) {
        if (index->records % index->interval == 0) index->offsets.push_back(position);
        ++index->records;
      }
      at_line_start = buffer[i] == '\n';
      if (at_line_start) in_header = false;
    }
  }
  return absl::OkStatus();
}

absl::Status IndexTfRecords(RecordFileIndex* index) {
  std::FILE* f = std::fopen(index->path.c_str(), "rbe");
  if (f == nullptr) return CannotOpen(index->path);
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> closer(f, std::fclose);
  int64_t offset = 0;
  while (offset < index->bytes) {
    unsigned char head[12];
    const size_t got = std::fread(head, 1, sizeof(head), f);
    uint64_t length = 0;
    uint32_t crc = 0;
    for (int b = 0; b < 8; ++b) length |= uint64_t{head[b]} << (8 * b);
    for (int b = 0; b < 4; ++b) crc |= uint32_t{head[8 + b]} << (8 * b);
    const uint64_t left = static_cast<uint64_t>(index->bytes - offset);
    const char* lost = nullptr;
    if (got < sizeof(head)) {
      lost = ": the file ends inside the record";
    } else if (MaskCrc32c(Crc32c(absl::string_view(reinterpret_cast<const char*>(head), 8))) !=
               crc) {
      lost = ": bad length CRC";
    } else if (length > left || length + kTfRecordOverheadBytes > left) {
      lost = ": the file ends inside the record";
    }
    if (lost != nullptr) {
      index->tail = absl::DataLossError(
          absl::StrCat("file ", index->path, ", record at byte ", offset, lost));
      break;
    }
    if (index->records % index->interval == 0) index->offsets.push_back(offset);
    ++index->records;
    offset += static_cast<int64_t>(length) + static_cast<int64_t>(kTfRecordOverheadBytes);
    if (fseeko(f, offset, SEEK_SET) != 0) return CannotOpen(index->path);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<RecordFileIndex> IndexRecordFile(const std::string& path, bool tfrecord,
                                                bool header, int64_t interval) {
  RecordFileIndex index;
  index.path = path;
  index.interval = interval;
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return CannotOpen(path);
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat("data file ", path, " is not a regular file"));
  }
  index.bytes = static_cast<int64_t>(st.st_size);
  if (tfrecord) {
    if (absl::Status s = IndexTfRecords(&index); !s.ok()) return s;
  } else {
    index.gzip = IsGzip(path);
    if (absl::Status s = IndexLines(header, &index); !s.ok()) return s;
  }
  return index;
}

absl::StatusOr<std::vector<std::string>> ExpandDataGlobs(const std::vector<std::string>& patterns) {
  std::vector<std::string> files;
  for (const std::string& pattern : patterns) {
    if (pattern.find_first_of("*?[") == std::string::npos) {
      files.push_back(pattern);  // opened (and named if missing) by the indexer
      continue;
    }
    glob_t g;
    const int rc = glob(pattern.c_str(), GLOB_ERR, nullptr, &g);
    if (rc == GLOB_NOMATCH) {
      globfree(&g);
      return absl::NotFoundError(
          absl::StrCat("data path pattern '", pattern, "' matches no file"));
    }
    if (rc != 0) {
      globfree(&g);
      return absl::NotFoundError(
          absl::StrCat("data path pattern '", pattern, "' cannot be expanded (a directory "
                       "on its way cannot be read)"));
    }
    // glob(3) returns its matches sorted (no GLOB_NOSORT).
    for (size_t i = 0; i < g.gl_pathc; ++i) files.emplace_back(g.gl_pathv[i]);
    globfree(&g);
  }
  return files;
}

}  // namespace pscluster
