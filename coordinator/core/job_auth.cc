#include "coordinator/core/job_auth.h"

#include <openssl/crypto.h>

#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace pscluster {
namespace {

constexpr size_t kMinTokenChars = 16;

bool IsTokenChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || absl::StrContains("._~+/=-", c);
}

bool Equal(absl::string_view a, absl::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace

absl::StatusOr<JobAuth> JobAuth::FromFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read tokens file ", path));
  std::stringstream text;
  text << in.rdbuf();
  return FromText(text.str(), path);
}

absl::StatusOr<JobAuth> JobAuth::FromText(absl::string_view text, absl::string_view source) {
  JobAuth auth;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    std::string user = "default";
    absl::string_view token = line;
    if (const size_t colon = line.find(':'); colon != absl::string_view::npos) {
      user = std::string(absl::StripAsciiWhitespace(line.substr(0, colon)));
      token = absl::StripAsciiWhitespace(line.substr(colon + 1));
      if (user.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat(source, ":", line_number, ": empty user before ':'"));
      }
    }
    // The message never quotes the token.
    if (token.size() < kMinTokenChars) {
      return absl::InvalidArgumentError(absl::StrCat(source, ":", line_number, ": the token of '",
                                                     user, "' is shorter than ", kMinTokenChars,
                                                     " characters"));
    }
    for (char c : token) {
      if (!IsTokenChar(c)) {
        return absl::InvalidArgumentError(
            absl::StrCat(source, ":", line_number, ": the token of '", user,
                         "' has a character outside [A-Za-z0-9._~+/=-]"));
      }
    }
    for (const auto& [known, known_user] : auth.tokens_) {
      if (known == token) {
        return absl::InvalidArgumentError(
            absl::StrCat(source, ":", line_number, ": the same token as user '", known_user, "'"));
      }
    }
    auth.tokens_.emplace_back(std::string(token), std::move(user));
  }
  if (auth.tokens_.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": no token in it"));
  }
  return auth;
}

absl::StatusOr<std::string> JobAuth::Authenticate(absl::string_view authorization) const {
  if (!enabled()) return std::string();
  if (authorization.empty()) {
    return absl::UnauthenticatedError(
        "this coordinator needs a bearer token (psctl --token_file FILE)");
  }
  constexpr absl::string_view kBearer = "Bearer ";
  if (!absl::StartsWith(authorization, kBearer)) {
    return absl::UnauthenticatedError("the authorization header is not 'Bearer TOKEN'");
  }
  const absl::string_view token = authorization.substr(kBearer.size());
  const std::string* user = nullptr;
  for (const auto& [known, known_user] : tokens_) {
    if (Equal(known, token)) user = &known_user;  // no early exit: same time for every token
  }
  if (user == nullptr) return absl::UnauthenticatedError("unknown bearer token");
  return *user;
}

}  // namespace pscluster
