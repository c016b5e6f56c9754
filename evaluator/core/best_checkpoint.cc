#include "evaluator/core/best_checkpoint.h"

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/checkpoint_file.h"

namespace pscluster {
namespace {

namespace fs = std::filesystem;

absl::Status FsError(const std::error_code& ec, const std::string& what) {
  return absl::Status(absl::ErrnoToStatusCode(ec.value()), absl::StrCat(what, ": ", ec.message()));
}

absl::Status ErrnoError(int error, const std::string& what) {
  return absl::Status(absl::ErrnoToStatusCode(error),
                      absl::StrCat(what, ": ", std::strerror(error)));
}

void FsyncDir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

std::string FormatRecord(const BestRecord& r) {
  return absl::StrFormat("checkpoint %d\nstep %d\nmetric %s\nmode %s\nvalue %.17g\n",
                         r.checkpoint_id, r.step, r.metric, r.maximize ? "max" : "min", r.value);
}

// Links (or, across file systems, copies) `from` to `to`.
absl::Status LinkOrCopy(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  fs::create_hard_link(from, to, ec);
  if (!ec) return absl::OkStatus();
  if (ec == std::errc::no_such_file_or_directory) {
    return absl::NotFoundError(absl::StrCat("checkpoint file ", from.string(),
                                            " is gone (the job pruned the checkpoint)"));
  }
  ec.clear();
  fs::copy_file(from, to, fs::copy_options::overwrite_existing, ec);
  if (ec == std::errc::no_such_file_or_directory) {
    return absl::NotFoundError(absl::StrCat("checkpoint file ", from.string(), " is gone"));
  }
  if (ec) return FsError(ec, absl::StrCat("cannot copy ", from.string(), " to ", to.string()));
  return absl::OkStatus();
}

}  // namespace

std::string BestDir(const std::string& checkpoint_dir) { return checkpoint_dir + "/best"; }

absl::Status KeepBestCheckpoint(const std::string& checkpoint_dir,
                                const CheckpointManifest& manifest, const BestRecord& record) {
  const fs::path dir(checkpoint_dir);
  const std::string ckpt = absl::StrCat("ckpt-", manifest.checkpoint_id());
  const fs::path staging = dir / ".best.tmp";
  const fs::path best = BestDir(checkpoint_dir);
  std::error_code ec;
  fs::remove_all(staging, ec);  // an interrupted build
  if (ec) return FsError(ec, absl::StrCat("cannot remove ", staging.string()));
  fs::create_directories(staging / ckpt, ec);
  if (ec) return FsError(ec, absl::StrCat("cannot create ", (staging / ckpt).string()));
  auto fail = [&](absl::Status s) {
    std::error_code ignored;
    fs::remove_all(staging, ignored);
    return s;
  };
  for (const CheckpointFile& f : manifest.files()) {
    const std::string base = fs::path(f.name()).filename().string();
    if (absl::Status s = LinkOrCopy(dir / ckpt / base, staging / ckpt / base); !s.ok()) {
      return fail(s);
    }
  }
  if (absl::Status s =
          WriteFileAtomically((staging / ckpt / "MANIFEST").string(), manifest.SerializeAsString())
              .status();
      !s.ok()) {
    return fail(s);
  }
  // The job log holds the spec that `psctl checkpoint verify/export` read;
  // a copy, since the job appends to its own.
  if (fs::exists(dir / "joblog", ec)) {
    fs::copy_file(dir / "joblog", staging / "joblog", fs::copy_options::overwrite_existing, ec);
    if (ec) return fail(FsError(ec, absl::StrCat("cannot copy ", (dir / "joblog").string())));
  }
  if (absl::Status s =
          WriteFileAtomically((staging / "BEST").string(), FormatRecord(record)).status();
      !s.ok()) {
    return fail(s);
  }
  FsyncDir(staging.string());
  if (fs::exists(best, ec)) {
    // One atomic step: best/ becomes the new copy, .best.tmp the old one.
    if (::renameat2(AT_FDCWD, staging.c_str(), AT_FDCWD, best.c_str(), RENAME_EXCHANGE) != 0) {
      return fail(ErrnoError(
          errno, absl::StrCat("cannot exchange ", staging.string(), " and ", best.string())));
    }
    FsyncDir(checkpoint_dir);
    fs::remove_all(staging, ec);  // the old best; a leftover is removed next time
    return absl::OkStatus();
  }
  fs::rename(staging, best, ec);
  if (ec) {
    return fail(
        FsError(ec, absl::StrCat("cannot rename ", staging.string(), " to ", best.string())));
  }
  FsyncDir(checkpoint_dir);
  return absl::OkStatus();
}

absl::StatusOr<BestRecord> ReadBestRecord(const std::string& checkpoint_dir) {
  const std::string path = BestDir(checkpoint_dir) + "/BEST";
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("no best checkpoint record ", path));
  std::stringstream text;
  text << in.rdbuf();
  BestRecord r;
  bool have_id = false;
  for (absl::string_view line : absl::StrSplit(text.str(), '\n', absl::SkipWhitespace())) {
    std::vector<absl::string_view> kv =
        absl::StrSplit(absl::StripAsciiWhitespace(line), ' ', absl::SkipEmpty());
    bool ok = kv.size() == 2;
    if (ok && kv[0] == "checkpoint") {
      ok = absl::SimpleAtoi(kv[1], &r.checkpoint_id);
      have_id = ok;
    } else if (ok && kv[0] == "step") {
      ok = absl::SimpleAtoi(kv[1], &r.step);
    } else if (ok && kv[0] == "metric") {
      r.metric = std::string(kv[1]);
    } else if (ok && kv[0] == "mode") {
      ok = kv[1] == "max" || kv[1] == "min";
      r.maximize = kv[1] == "max";
    } else if (ok && kv[0] == "value") {
      ok = absl::SimpleAtod(kv[1], &r.value);
    } else {
      ok = false;
    }
    if (!ok) return absl::DataLossError(absl::StrCat(path, ": malformed line '", line, "'"));
  }
  if (!have_id) return absl::DataLossError(absl::StrCat(path, ": no checkpoint line"));
  return r;
}

}  // namespace pscluster
