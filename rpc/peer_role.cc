#include "rpc/peer_role.h"

#include <grpc/grpc_security_constants.h>
#include <openssl/asn1.h>
#include <openssl/crypto.h>
#include <openssl/objects.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace pscluster {

std::optional<std::string> RoleOfSubject(absl::string_view subject) {
  // Attributes are separated by unescaped commas (or '+' in a multi-valued
  // RDN); a value may escape characters with '\'.
  size_t start = 0;
  for (size_t i = 0; i <= subject.size(); ++i) {
    if (i < subject.size() && subject[i] == '\\') {
      ++i;
      continue;
    }
    if (i < subject.size() && subject[i] != ',' && subject[i] != '+') continue;
    absl::string_view attribute = absl::StripAsciiWhitespace(subject.substr(start, i - start));
    start = i + 1;
    const size_t eq = attribute.find('=');
    if (eq == absl::string_view::npos) continue;
    if (absl::EqualsIgnoreCase(absl::StripAsciiWhitespace(attribute.substr(0, eq)), "OU")) {
      return std::string(absl::StripAsciiWhitespace(attribute.substr(eq + 1)));
    }
  }
  return std::nullopt;
}

std::optional<std::string> PeerRole(const grpc::ServerContextBase& context) {
  std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (auth == nullptr || !auth->IsPeerAuthenticated()) return std::nullopt;
  for (const grpc::string_ref& subject : auth->FindPropertyValues(GRPC_X509_SUBJECT_PROPERTY_NAME)) {
    std::optional<std::string> role =
        RoleOfSubject(absl::string_view(subject.data(), subject.size()));
    if (role.has_value()) return role;
  }
  return std::nullopt;
}

std::optional<std::string> RoleOfCertificate(const X509* cert) {
  if (cert == nullptr) return std::nullopt;
  const X509_NAME* subject = X509_get_subject_name(cert);
  const int index = X509_NAME_get_index_by_NID(subject, NID_organizationalUnitName, -1);
  if (index < 0) return std::nullopt;
  const ASN1_STRING* data = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subject, index));
  unsigned char* utf8 = nullptr;
  const int length = ASN1_STRING_to_UTF8(&utf8, data);
  if (length < 0) return std::string();  // an OU that is no string: no role that is allowed
  std::string role(reinterpret_cast<const char*>(utf8), static_cast<size_t>(length));
  OPENSSL_free(utf8);
  return role;
}

absl::Status CheckRole(const std::optional<std::string>& role,
                       std::initializer_list<absl::string_view> allowed, absl::string_view method) {
  if (!role.has_value()) return absl::OkStatus();
  for (absl::string_view a : allowed) {
    if (*role == a) return absl::OkStatus();
  }
  return absl::PermissionDeniedError(absl::StrCat(method, " is refused to a '", *role,
                                                  "' certificate (only ",
                                                  absl::StrJoin(allowed, ", "), " may call it)"));
}

grpc::Status CheckPeerRole(const grpc::ServerContextBase& context,
                           std::initializer_list<absl::string_view> allowed,
                           absl::string_view method) {
  const absl::Status s = CheckRole(PeerRole(context), allowed, method);
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(grpc::StatusCode::PERMISSION_DENIED, std::string(s.message()));
}

}  // namespace pscluster
