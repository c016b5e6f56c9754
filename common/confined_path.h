// Confined paths: turning a name or path that arrived over the network (a
// checkpoint name in a Save/Restore request, a job's checkpoint.dir or data
// files) into a file system path that provably lies under a root directory
// the server's operator chose (--checkpoint_root, --data_root).
//
// Containment is decided on the real path: every symlink among the existing
// components is resolved (a symlink inside a root that points outside it
// does not let a name escape), ".." is applied after resolution, and a
// dangling symlink is refused. Components that do not exist yet are taken
// literally. The check is made when a request arrives; a process that can
// change the tree under a root between the check and the open is outside
// this model (such a process can already write there).
//
// Thread-safe (free functions; they only read the file system).
#ifndef PSCLUSTER_COMMON_CONFINED_PATH_H_
#define PSCLUSTER_COMMON_CONFINED_PATH_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pscluster {

// Longest checkpoint name accepted, in bytes (a component: 255).
inline constexpr size_t kMaxCheckpointNameBytes = 1024;

// OK when `name` is a well-formed checkpoint name: non-empty, relative, at
// most kMaxCheckpointNameBytes, components of [A-Za-z0-9._-] separated by
// single '/', none empty, "." or "..", none longer than 255 bytes.
// INVALID_ARGUMENT naming the name and the rule it breaks otherwise.
absl::Status ValidateCheckpointName(absl::string_view name);

// The real path of `path` (absolute; resolved from the working directory
// when relative): symlinks of the existing components resolved, "." and ".."
// applied, components past the last existing one appended as they are.
// INVALID_ARGUMENT for a dangling symlink or a symlink loop (naming the
// path); other lstat/realpath errors with their errno's code.
absl::StatusOr<std::string> RealPathOfExistingPrefix(const std::string& path);

// Whether the real path `path` is `root` or lies below it (component-wise:
// "/a/bc" is not under "/a/b"). Both must already be real paths.
bool IsUnderRoot(absl::string_view path, absl::string_view root);

// realpath(root). FAILED_PRECONDITION naming `flag` (e.g. "--checkpoint_root")
// when `root` is empty, does not exist or is not a directory.
absl::StatusOr<std::string> RealRoot(const std::string& root, absl::string_view flag);

// The file a checkpoint name designates: realpath(root)/name with the
// symlinks of its existing components resolved. `root` is the directory of
// `flag` (for messages).
// FAILED_PRECONDITION: no root (naming `flag`), or it does not exist.
// INVALID_ARGUMENT: a malformed name (ValidateCheckpointName), or one whose
//   real path is not strictly below the root (naming the name, never the
//   target of a symlink).
absl::StatusOr<std::string> ResolveCheckpointName(const std::string& root, absl::string_view flag,
                                                  absl::string_view name);

// `path` confined to a root: a relative path is taken relative to
// realpath(root), an absolute one as it is; returns its real path
// (RealPathOfExistingPrefix), which must be `root` or below it.
// FAILED_PRECONDITION as RealRoot; INVALID_ARGUMENT naming the path, the
// root and `flag` when it resolves outside.
absl::StatusOr<std::string> ResolveUnderRoot(const std::string& root, absl::string_view flag,
                                             const std::string& path);

// `path` relative to the real root `root` ("" when equal).
// REQUIRES: IsUnderRoot(path, root).
std::string RelativeToRoot(absl::string_view path, absl::string_view root);

}  // namespace pscluster

#endif  // PSCLUSTER_COMMON_CONFINED_PATH_H_
