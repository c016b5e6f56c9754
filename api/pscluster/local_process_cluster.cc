#include "api/pscluster/local_process_cluster.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/local_cluster.h"
#include "client/local_tls.h"

namespace pscluster {
namespace {

// The tokens file's user; jobs submitted with the token belong to it.
constexpr char kTokenUser[] = "pscluster";

bool IsExecutableFile(const std::string& path) { return access(path.c_str(), X_OK) == 0; }

std::string DirOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

// The directories a server binary is looked for in: options.bin_dir, else
// that of the file holding this code (the Python extension or the program),
// then that of /proc/self/exe.
std::vector<std::string> BinaryDirs(const std::string& bin_dir) {
  if (!bin_dir.empty()) return {bin_dir};
  std::vector<std::string> dirs;
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&BinaryDirs), &info) != 0 && info.dli_fname != nullptr &&
      info.dli_fname[0] == '/') {
    dirs.push_back(DirOf(info.dli_fname));
  }
  char buf[PATH_MAX];
  if (const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1); n > 0) {
    const std::string exe_dir = DirOf(std::string(buf, static_cast<size_t>(n)));
    if (std::find(dirs.begin(), dirs.end(), exe_dir) == dirs.end()) dirs.push_back(exe_dir);
  }
  return dirs;
}

// `<dir>/<name>`, then `<dir>/../<package>/<name>`, in each of `dirs`.
absl::StatusOr<std::string> FindServerBinary(const std::vector<std::string>& dirs,
                                             const std::string& name,
                                             const std::string& package) {
  std::vector<std::string> tried;
  for (const std::string& dir : dirs) {
    for (const std::string& path :
         {absl::StrCat(dir, "/", name), absl::StrCat(dir, "/../", package, "/", name)}) {
      if (IsExecutableFile(path)) return path;
      tried.push_back(path);
    }
  }
  return absl::NotFoundError(absl::StrCat(
      name, " not found (looked at ", absl::StrJoin(tried, ", "),
      "); build it (bazel build //", package, ":", name, ") or give the directory of the servers"));
}

// 32 hex digits from /dev/urandom: a token JobAuth accepts (>= 16 chars).
absl::StatusOr<std::string> RandomToken() {
  std::ifstream in("/dev/urandom", std::ios::binary);
  unsigned char bytes[16];
  if (!in.read(reinterpret_cast<char*>(bytes), sizeof(bytes))) {
    return absl::InternalError("cannot read /dev/urandom for the cluster's token");
  }
  std::string token;
  for (unsigned char b : bytes) absl::StrAppend(&token, absl::Hex(b, absl::kZeroPad2));
  return token;
}

// Writes "USER:TOKEN" to `path`, readable by its owner only.
absl::Status WriteTokensFile(const std::string& path, const std::string& token) {
  {
    std::ofstream out(path, std::ios::trunc);
    out << kTokenUser << ":" << token << "\n";
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  }
  chmod(path.c_str(), 0600);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<LocalProcessCluster>> LocalProcessCluster::Start(
    const LocalProcessClusterOptions& options) {
  if (options.num_ps < 1 || options.num_workers < 1) {
    return absl::InvalidArgumentError(absl::StrCat("a local cluster needs at least 1 PS and 1 "
                                                   "worker, not ", options.num_ps, " PS and ",
                                                   options.num_workers, " workers"));
  }
  LocalClusterOptions cluster_options;
  cluster_options.num_ps = options.num_ps;
  cluster_options.num_workers = options.num_workers;
  cluster_options.start_timeout = options.start_timeout;
  cluster_options.interrupted = options.interrupted;
  // Nothing polls the cluster, so nothing would restart a child.
  cluster_options.restart.enabled = false;
  const std::vector<std::string> dirs = BinaryDirs(options.bin_dir);
  for (auto [field, name, package] :
       {std::tuple{&cluster_options.ps_server_bin, "ps_server", "ps"},
        std::tuple{&cluster_options.worker_server_bin, "worker_server", "worker"},
        std::tuple{&cluster_options.coordinator_bin, "coordinator", "coordinator"}}) {
    absl::StatusOr<std::string> bin = FindServerBinary(dirs, name, package);
    if (!bin.ok()) return bin.status();
    *field = *std::move(bin);
  }

  std::unique_ptr<LocalProcessCluster> cluster(new LocalProcessCluster());
  if (options.run_dir.empty()) {
    std::string templ = "/tmp/pscluster-XXXXXX";
    if (mkdtemp(templ.data()) == nullptr) {
      return absl::InternalError(absl::StrCat("cannot create a run directory under /tmp: ",
                                              std::strerror(errno)));
    }
    cluster->run_dir_ = templ;
    cluster->remove_run_dir_ = !options.keep_run_dir;
  } else {
    std::error_code ec;
    std::filesystem::create_directories(options.run_dir, ec);
    if (ec) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot create run directory ", options.run_dir, ": ", ec.message()));
    }
    cluster->run_dir_ = options.run_dir;
  }
  // From here on the destructor removes a run directory made above.
  const std::string& run_dir = cluster->run_dir_;
  cluster_options.run_dir = run_dir;
  cluster_options.worker_command = options.worker_command;

  // The workers share this machine's cores, as under psctl local.
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  cluster_options.worker_flags.push_back(
      absl::StrCat("--compute_threads=", std::max(1, cores / options.num_workers)));
  const std::string checkpoint_root = run_dir + "/checkpoints";
  {
    std::error_code ec;
    std::filesystem::create_directories(checkpoint_root, ec);
    if (ec) {
      return absl::InternalError(absl::StrCat("cannot create ", checkpoint_root, ": ",
                                              ec.message()));
    }
  }
  cluster_options.ps_flags.push_back("--checkpoint_root=" + checkpoint_root);
  cluster_options.coordinator_flags.push_back("--checkpoint_root=" + checkpoint_root);
  if (!options.data_roots.empty()) {
    const std::string data_root = "--data_root=" + absl::StrJoin(options.data_roots, ",");
    cluster_options.coordinator_flags.push_back(data_root);
    cluster_options.worker_flags.push_back(data_root);
  }

  JobClientOptions& client = cluster->client_options_;
  if (options.tls) {
    absl::StatusOr<LocalTls> tls = MakeLocalTls(run_dir + "/tls");
    if (!tls.ok()) return tls.status();
    cluster_options.server_flags = tls->ServerFlags();
    cluster_options.coordinator_flags.push_back("--auth_tokens_file=" + tls->tokens_file);
    cluster->token_ = tls->token;
    client.tls_cert = tls->files.cert;
    client.tls_key = tls->files.key;
    client.tls_ca = tls->files.ca;
    client.tls_server_name = tls->files.server_name;
  } else {
    absl::StatusOr<std::string> token = RandomToken();
    if (!token.ok()) return token.status();
    const std::string tokens_file = run_dir + "/tokens";
    if (absl::Status s = WriteTokensFile(tokens_file, *token); !s.ok()) return s;
    cluster_options.coordinator_flags.push_back("--auth_tokens_file=" + tokens_file);
    cluster->token_ = *std::move(token);
  }
  client.token = cluster->token_;

  absl::StatusOr<std::unique_ptr<LocalCluster>> started = LocalCluster::Start(cluster_options);
  if (!started.ok()) {
    return absl::Status(started.status().code(),
                        absl::StrCat("local cluster did not start: ", started.status().message()));
  }
  cluster->cluster_ = *std::move(started);
  cluster->address_ = cluster->cluster_->coordinator_address();
  return cluster;
}

LocalProcessCluster::~LocalProcessCluster() { Stop(); }

std::vector<int> LocalProcessCluster::pids() const {
  std::vector<int> pids;
  if (cluster_ == nullptr) return pids;
  const ClusterPids p = cluster_->pids();
  pids.insert(pids.end(), p.ps.begin(), p.ps.end());
  pids.insert(pids.end(), p.worker.begin(), p.worker.end());
  pids.push_back(p.coordinator);
  return pids;
}

void LocalProcessCluster::Stop(absl::Duration grace) {
  if (cluster_ != nullptr) cluster_->Stop(grace);
  if (remove_run_dir_) {
    std::error_code ec;
    std::filesystem::remove_all(run_dir_, ec);
    remove_run_dir_ = false;
  }
}

}  // namespace pscluster
