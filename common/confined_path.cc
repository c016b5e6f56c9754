#include "common/confined_path.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"

namespace pscluster {
namespace {

constexpr size_t kMaxComponentBytes = 255;

bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-';
}

std::string Parent(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == 0 || slash == std::string::npos ? "/" : path.substr(0, slash);
}

std::string Join(const std::string& dir, absl::string_view name) {
  return dir == "/" ? absl::StrCat("/", name) : absl::StrCat(dir, "/", name);
}

absl::Status ErrnoError(int error, absl::string_view what, absl::string_view path) {
  return absl::Status(absl::ErrnoToStatusCode(error),
                      absl::StrCat("cannot ", what, " ", path, ": ", std::strerror(error)));
}

}  // namespace

absl::Status ValidateCheckpointName(absl::string_view name) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint name '", name.substr(0, 200),
                                                   name.size() > 200 ? "...'" : "'", " ", why,
                                                   " (a name is relative to the checkpoint "
                                                   "root: components of [A-Za-z0-9._-] and '/')"));
  };
  if (name.empty()) return bad("is empty");
  if (name.size() > kMaxCheckpointNameBytes) {
    return bad(absl::StrCat("is longer than ", kMaxCheckpointNameBytes, " bytes"));
  }
  if (name[0] == '/') return bad("is absolute");
  for (char c : name) {
    if (c != '/' && !IsNameChar(c)) return bad("has a character outside [A-Za-z0-9._-/]");
  }
  for (absl::string_view component : absl::StrSplit(name, '/')) {
    if (component.empty()) return bad("has an empty component");
    if (component == "." || component == "..") return bad("has a '.' or '..' component");
    if (component.size() > kMaxComponentBytes) {
      return bad(absl::StrCat("has a component longer than ", kMaxComponentBytes, " bytes"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> RealPathOfExistingPrefix(const std::string& path) {
  std::string absolute = path;
  if (absolute.empty() || absolute[0] != '/') {
    char cwd[PATH_MAX];
    if (getcwd(cwd, sizeof(cwd)) == nullptr) return ErrnoError(errno, "resolve", path);
    absolute = Join(cwd, path);
  }
  std::string current = "/";
  for (absl::string_view component : absl::StrSplit(absolute, '/', absl::SkipEmpty())) {
    if (component == ".") continue;
    if (component == "..") {
      current = Parent(current);  // `current` has no symlink left in it
      continue;
    }
    std::string next = Join(current, component);
    struct stat st;
    if (lstat(next.c_str(), &st) != 0) {
      // Missing (or under a non-directory): taken literally from here on.
      if (errno != ENOENT && errno != ENOTDIR) return ErrnoError(errno, "stat", next);
    } else if (S_ISLNK(st.st_mode)) {
      char real[PATH_MAX];
      if (realpath(next.c_str(), real) == nullptr) {
        if (errno == ENOENT || errno == ELOOP || errno == ENOTDIR) {
          return absl::InvalidArgumentError(
              absl::StrCat(path, ": ", next, " is a dangling symlink or a symlink loop"));
        }
        return ErrnoError(errno, "resolve", next);
      }
      next = real;
    }
    current = std::move(next);
  }
  return current;
}

bool IsUnderRoot(absl::string_view path, absl::string_view root) {
  if (root == "/") return absl::StartsWith(path, "/");
  return path == root ||
         (absl::StartsWith(path, root) && path.size() > root.size() && path[root.size()] == '/');
}

absl::StatusOr<std::string> RealRoot(const std::string& root, absl::string_view flag) {
  if (root.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("no ", flag, " is set: start the server with ", flag, "=DIR"));
  }
  char real[PATH_MAX];
  struct stat st;
  if (realpath(root.c_str(), real) == nullptr || stat(real, &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(flag, "=", root, " is not an existing directory"));
  }
  return std::string(real);
}

absl::StatusOr<std::string> ResolveCheckpointName(const std::string& root, absl::string_view flag,
                                                  absl::string_view name) {
  ASSIGN_OR_RETURN(const std::string real_root, RealRoot(root, flag));
  RETURN_IF_ERROR(ValidateCheckpointName(name));
  absl::StatusOr<std::string> path = RealPathOfExistingPrefix(Join(real_root, name));
  if (!path.ok() || !IsUnderRoot(*path, real_root) || *path == real_root) {
    // Never the symlink's target: the caller learns nothing outside the root.
    return absl::InvalidArgumentError(absl::StrCat("checkpoint name '", name, "' leads outside ",
                                                   flag, " (through a symlink) or dangles"));
  }
  return *path;
}

absl::StatusOr<std::string> ResolveUnderRoot(const std::string& root, absl::string_view flag,
                                             const std::string& path) {
  ASSIGN_OR_RETURN(const std::string real_root, RealRoot(root, flag));
  const std::string joined = !path.empty() && path[0] == '/' ? path : Join(real_root, path);
  absl::StatusOr<std::string> real = RealPathOfExistingPrefix(joined);
  if (!real.ok() || !IsUnderRoot(*real, real_root)) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", path, "' is outside ", flag, "=", root,
                     real.ok() ? "" : absl::StrCat(" (", real.status().message(), ")")));
  }
  return *real;
}

std::string RelativeToRoot(absl::string_view path, absl::string_view root) {
  if (path.size() <= root.size()) return "";
  return std::string(path.substr(root == "/" ? 1 : root.size() + 1));
}

}  // namespace pscluster
