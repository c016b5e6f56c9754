// JobAuth: who may use the coordinator's job service (submit, cancel, list,
// status, watch, describe, events).
//
// Bearer tokens from a file: each non-empty line not starting with '#' is
// `USER:TOKEN`, or a bare `TOKEN` for user "default". A token is at least 16
// characters of [A-Za-z0-9._~+/=-] (so `openssl rand -hex 32` makes one).
// A request carries `authorization: Bearer TOKEN` (gRPC metadata); psctl
// sends it from --token_file. A job belongs to the user who submitted it,
// and only that user may cancel it.
//
// Without a tokens file the service is open: every caller is user "" and may
// cancel any job (a coordinator on loopback for one user, as `psctl local`
// without --tls runs it).
//
// Thread-safe (immutable after construction).
#ifndef PSCLUSTER_COORDINATOR_CORE_JOB_AUTH_H_
#define PSCLUSTER_COORDINATOR_CORE_JOB_AUTH_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pscluster {

class JobAuth {
 public:
  // Open: no authentication.
  JobAuth() = default;

  // Reads the tokens file. NOT_FOUND if it cannot be read; INVALID_ARGUMENT
  // naming the line of a malformed entry, a short token, a token given
  // twice, or a file without any token.
  static absl::StatusOr<JobAuth> FromFile(const std::string& path);
  // As FromFile, from the file's text; `source` names it in errors.
  static absl::StatusOr<JobAuth> FromText(absl::string_view text, absl::string_view source);

  bool enabled() const { return !tokens_.empty(); }

  // The caller's user, from the value of its `authorization` metadata (empty
  // when absent). Open service: "". UNAUTHENTICATED when the header is
  // missing, not "Bearer TOKEN", or names no known token (tokens are
  // compared in constant time).
  absl::StatusOr<std::string> Authenticate(absl::string_view authorization) const;

 private:
  std::vector<std::pair<std::string, std::string>> tokens_;  // (token, user)
};

}  // namespace pscluster

#endif  // PSCLUSTER_COORDINATOR_CORE_JOB_AUTH_H_
