#include "client/local_tls.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "client/child_process.h"
#include "common/update_lease.h"

namespace pscluster {
namespace {

// The openssl binary: Debian installs it in /usr/bin.
std::string OpensslPath() {
  for (const char* p : {"/usr/bin/openssl", "/usr/local/bin/openssl", "/bin/openssl"}) {
    if (access(p, X_OK) == 0) return p;
  }
  return "";
}

absl::Status Run(const std::string& step, std::vector<std::string> argv, const std::string& log) {
  SpawnOptions o;
  o.name = "openssl";
  o.argv = std::move(argv);
  o.log_path = log;
  o.append_log = true;
  absl::StatusOr<std::unique_ptr<ChildProcess>> child = ChildProcess::Spawn(o);
  if (!child.ok()) return child.status();
  if (!(*child)->WaitFor(absl::Seconds(60))) {
    (*child)->Stop(absl::Seconds(1));
    return absl::InternalError(absl::StrCat("openssl: ", step, " did not finish; see ", log));
  }
  const std::optional<int> status = (*child)->wait_status();
  if (!status || !WIFEXITED(*status) || WEXITSTATUS(*status) != 0) {
    return absl::InternalError(absl::StrCat("openssl: ", step, " failed; see ", log));
  }
  return absl::OkStatus();
}

absl::Status WritePrivate(const std::string& path, const std::string& contents) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) return absl::InternalError(absl::StrCat("cannot write ", path));
  const bool ok =
      ::write(fd, contents.data(), contents.size()) == static_cast<ssize_t>(contents.size());
  ::close(fd);
  return ok ? absl::OkStatus() : absl::InternalError(absl::StrCat("cannot write ", path));
}

}  // namespace

std::vector<std::string> LocalTls::ServerFlags() const {
  return {"--tls_cert=" + files.cert, "--tls_key=" + files.key, "--tls_ca=" + files.ca};
}

absl::StatusOr<LocalTls> MakeLocalTls(const std::string& dir) {
  const std::string openssl = OpensslPath();
  if (openssl.empty()) {
    return absl::NotFoundError(
        "--tls needs the openssl command (apt-get install openssl; ./setup.sh installs it)");
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || ::chmod(dir.c_str(), 0700) != 0) {
    return absl::InternalError(absl::StrCat("cannot create ", dir));
  }
  const std::string log = dir + "/openssl.log";
  const std::string ca_key = dir + "/ca.key";
  LocalTls tls;
  tls.files.ca = dir + "/ca.pem";
  tls.files.cert = dir + "/cluster.pem";
  tls.files.key = dir + "/cluster.key";
  const std::string csr = dir + "/cluster.csr";
  const std::string ext = dir + "/cluster.ext";
  {
    std::ofstream out(ext);
    out << "basicConstraints=critical,CA:FALSE\n"
           "keyUsage=critical,digitalSignature,keyEncipherment\n"
           "extendedKeyUsage=serverAuth,clientAuth\n"
           "subjectAltName=IP:127.0.0.1,DNS:localhost\n";
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", ext));
  }
  const std::vector<std::string> ec_key = {"-newkey", "ec", "-pkeyopt",
                                           "ec_paramgen_curve:prime256v1", "-nodes"};
  std::vector<std::string> make_ca = {openssl, "req", "-x509"};
  make_ca.insert(make_ca.end(), ec_key.begin(), ec_key.end());
  make_ca.insert(make_ca.end(),
                 {"-keyout", ca_key, "-out", tls.files.ca, "-days", "2", "-subj",
                  "/CN=psctl local CA", "-addext", "basicConstraints=critical,CA:TRUE", "-addext",
                  "keyUsage=critical,keyCertSign,cRLSign"});
  if (absl::Status s = Run("making the CA", make_ca, log); !s.ok()) return s;
  std::vector<std::string> make_csr = {openssl, "req"};
  make_csr.insert(make_csr.end(), ec_key.begin(), ec_key.end());
  make_csr.insert(make_csr.end(),
                  {"-keyout", tls.files.key, "-out", csr, "-subj", "/CN=pscluster"});
  if (absl::Status s = Run("making the cluster key", make_csr, log); !s.ok()) return s;
  if (absl::Status s =
          Run("signing the cluster certificate",
              {openssl, "x509", "-req", "-in", csr, "-CA", tls.files.ca, "-CAkey", ca_key,
               "-CAcreateserial", "-out", tls.files.cert, "-days", "2", "-extfile", ext},
              log);
      !s.ok()) {
    return s;
  }
  // Nobody may sign more certificates for this cluster.
  std::filesystem::remove(ca_key, ec);
  std::filesystem::remove(csr, ec);
  std::filesystem::remove(dir + "/ca.srl", ec);
  tls.token = absl::BytesToHexString(RandomSecret());
  tls.tokens_file = dir + "/tokens";
  if (absl::Status s = WritePrivate(tls.tokens_file, "psctl:" + tls.token + "\n"); !s.ok()) {
    return s;
  }
  return tls;
}

}  // namespace pscluster
