#include "common/event_file_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "common/tfrecord.h"

namespace pscluster {
namespace {

absl::Status ErrnoError(int error, const std::string& what) {
  return absl::Status(absl::ErrnoToStatusCode(error),
                      absl::StrCat(what, ": ", std::strerror(error)));
}

std::string Hostname() {
  char name[HOST_NAME_MAX + 1] = {};
  if (gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

}  // namespace

absl::StatusOr<std::unique_ptr<EventFileWriter>> EventFileWriter::Create(const Options& options) {
  if (options.logdir.empty()) {
    return absl::InvalidArgumentError("an event file needs a logdir, and it is empty");
  }
  std::error_code ec;
  std::filesystem::create_directories(options.logdir, ec);
  if (ec) {
    return absl::Status(
        absl::ErrnoToStatusCode(ec.value()),
        absl::StrCat("cannot create the TensorBoard logdir ", options.logdir, ": ", ec.message()));
  }
  const std::string base =
      absl::StrCat(options.logdir, "/events.out.tfevents.", absl::ToUnixSeconds(options.now), ".",
                   options.hostname.empty() ? Hostname() : options.hostname, ".", getpid());
  // Two writers of one process in one second (two jobs, one logdir) each get
  // a file of their own.
  std::string path = base;
  int fd = -1;
  for (int n = 1;; ++n) {
    fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0 || errno != EEXIST || n > 1000) break;
    path = absl::StrCat(base, ".", n);
  }
  if (fd < 0) return ErrnoError(errno, "cannot create the TensorBoard event file " + path);
  std::FILE* file = fdopen(fd, "wb");
  if (file == nullptr) {
    const int error = errno;
    close(fd);
    return ErrnoError(error, "cannot open the TensorBoard event file " + path);
  }
  std::unique_ptr<EventFileWriter> writer(new EventFileWriter(path, file));
  tensorflow::Event version;
  version.set_wall_time(absl::ToDoubleSeconds(options.now - absl::UnixEpoch()));
  version.set_file_version(kEventFileVersion);
  if (absl::Status s = writer->WriteEvent(version); !s.ok()) return s;
  return writer;
}

EventFileWriter::~EventFileWriter() { std::fclose(file_); }

absl::Status EventFileWriter::WriteScalars(
    int64_t step, absl::Time wall_time,
    const std::vector<std::pair<std::string, double>>& scalars) {
  tensorflow::Event event;
  event.set_wall_time(absl::ToDoubleSeconds(wall_time - absl::UnixEpoch()));
  event.set_step(step);
  tensorflow::Summary* summary = event.mutable_summary();
  for (const auto& [tag, value] : scalars) {
    tensorflow::Summary::Value* v = summary->add_value();
    v->set_tag(tag);
    v->set_simple_value(static_cast<float>(value));
  }
  return WriteEvent(event);
}

absl::Status EventFileWriter::WriteEvent(const tensorflow::Event& event) {
  const std::string record = FrameTfRecord(event.SerializeAsString());
  errno = 0;
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size() ||
      std::fflush(file_) != 0) {
    const int error = errno != 0 ? errno : EIO;
    return ErrnoError(error, "cannot write the TensorBoard event file " + path_);
  }
  return absl::OkStatus();
}

}  // namespace pscluster
