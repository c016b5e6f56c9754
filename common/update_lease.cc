#include "common/update_lease.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace pscluster {
namespace {

std::string Hmac(absl::string_view key, absl::string_view message) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), out, &n);
  return std::string(reinterpret_cast<const char*>(out), n);
}

void AppendInt64(int64_t v, std::string* out) {
  for (int i = 0; i < 8; ++i)
    out->push_back(static_cast<char>((static_cast<uint64_t>(v) >> (8 * i)) & 0xff));
}

}  // namespace

std::string RandomSecret() {
  std::string secret(kJobKeyBytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(secret.data()), kJobKeyBytes) != 1) {
    // OpenSSL's CSPRNG seeds from getrandom(); failing here means no entropy
    // source at all, which no caller can work around.
    std::abort();
  }
  return secret;
}

std::string DeriveJobKey(absl::string_view coordinator_secret, absl::string_view job_id) {
  return Hmac(coordinator_secret, absl::StrCat("pscluster job key\n", job_id));
}

std::string MakeLease(absl::string_view job_key, absl::string_view job_id, int64_t closure_id,
                      int64_t steps) {
  std::string message = absl::StrCat("pscluster lease\n", job_id, "\n");
  AppendInt64(closure_id, &message);
  AppendInt64(steps, &message);
  return Hmac(job_key, message).substr(0, kLeaseBytes);
}

bool CheckLease(absl::string_view job_key, absl::string_view job_id, int64_t closure_id,
                int64_t steps, absl::string_view lease) {
  if (lease.size() != kLeaseBytes) return false;
  const std::string expected = MakeLease(job_key, job_id, closure_id, steps);
  return CRYPTO_memcmp(expected.data(), lease.data(), kLeaseBytes) == 0;
}

std::string DeriveWorkerKey(absl::string_view job_key) {
  return Hmac(job_key, "pscluster worker key\n");
}

std::string ControlMac(absl::string_view key, absl::string_view method,
                       absl::string_view request_bytes) {
  return Hmac(key, absl::StrCat("pscluster control\n", method, "\n", request_bytes));
}

bool CheckControlMac(absl::string_view key, absl::string_view method,
                     absl::string_view request_bytes, absl::string_view mac) {
  const std::string expected = ControlMac(key, method, request_bytes);
  return mac.size() == expected.size() &&
         CRYPTO_memcmp(expected.data(), mac.data(), expected.size()) == 0;
}

absl::StatusOr<std::string> LoadOrCreateSecret(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (in) {
    std::stringstream text;
    text << in.rdbuf();
    std::string secret = text.str();
    if (secret.size() != kJobKeyBytes) {
      return absl::InvalidArgumentError(absl::StrCat(path, " holds ", secret.size(),
                                                     " bytes, not a ", kJobKeyBytes,
                                                     "-byte secret; remove it to make a new one"));
    }
    return secret;
  }
  const std::string secret = RandomSecret();
  const std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("cannot create ", tmp));
  const bool written =
      ::write(fd, secret.data(), secret.size()) == static_cast<ssize_t>(secret.size()) &&
      ::fsync(fd) == 0;
  ::close(fd);
  if (!written || ::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    return absl::UnavailableError(absl::StrCat("cannot write ", path));
  }
  return secret;
}

}  // namespace pscluster
