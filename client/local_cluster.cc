#include "client/local_cluster.h"

#include <limits.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"

namespace pscluster {
namespace {

constexpr int kLogTailLines = 20;

std::string PortFile(const std::string& run_dir, const std::string& name) {
  return absl::StrCat(run_dir, "/", name, ".port");
}

std::string WithLogTail(const std::string& message, const ChildProcess& child) {
  const std::string tail = child.LogTail(kLogTailLines);
  if (tail.empty()) return absl::StrCat(message, " (log ", child.log_path(), " is empty)");
  return absl::StrCat(message, "; last lines of ", child.log_path(), ":\n", tail);
}

bool IsExecutableFile(const std::string& path) { return access(path.c_str(), X_OK) == 0; }

}  // namespace

absl::StatusOr<std::string> FindSiblingBinary(const std::string& name,
                                              const std::string& bazel_package) {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return absl::NotFoundError("cannot read /proc/self/exe to locate " + name);
  std::string self(buf, static_cast<size_t>(n));
  const std::string dir = self.substr(0, self.rfind('/'));
  const std::string installed = absl::StrCat(dir, "/", name);
  if (IsExecutableFile(installed)) return installed;
  const std::string bazel = absl::StrCat(dir, "/../", bazel_package, "/", name);
  if (IsExecutableFile(bazel)) return bazel;
  return absl::NotFoundError(absl::StrCat(name, " not found at ", installed, " or ", bazel));
}

absl::StatusOr<int> ReadPortFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("no port file ", path));
  std::stringstream buf;
  buf << in.rdbuf();
  int port = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(buf.str()), &port) || port <= 0 ||
      port > 65535) {
    return absl::DataLossError(absl::StrCat("port file ", path, " holds '", buf.str(),
                                            "', not a port number"));
  }
  return port;
}

absl::StatusOr<std::unique_ptr<LocalCluster>> LocalCluster::Start(
    const LocalClusterOptions& options) {
  if (options.num_ps < 1 || options.num_workers < 1) {
    return absl::InvalidArgumentError(absl::StrCat("a local cluster needs at least one ps and one ",
                                                   "worker, got --ps ", options.num_ps,
                                                   " --workers ", options.num_workers));
  }
  std::unique_ptr<LocalCluster> cluster(new LocalCluster());
  cluster->options_ = options;
  auto server_argv = [&](const std::string& bin, const std::string& name) {
    return std::vector<std::string>{bin, "--address=127.0.0.1:0",
                                    "--port_file=" + PortFile(options.run_dir, name)};
  };
  // PS and workers start together; the coordinator needs all their ports.
  for (int i = 0; i < options.num_ps; ++i) {
    const std::string name = absl::StrCat("ps-", i);
    auto child = cluster->Launch(name, server_argv(options.ps_server_bin, name));
    if (!child.ok()) return child.status();
    cluster->ps_.push_back(*child);
  }
  for (int i = 0; i < options.num_workers; ++i) {
    const std::string name = absl::StrCat("worker-", i);
    auto child = cluster->Launch(name, server_argv(options.worker_server_bin, name));
    if (!child.ok()) return child.status();
    cluster->workers_.push_back(*child);
  }
  auto ps_ports = cluster->WaitForPorts(cluster->ps_);
  if (!ps_ports.ok()) return ps_ports.status();
  auto worker_ports = cluster->WaitForPorts(cluster->workers_);
  if (!worker_ports.ok()) return worker_ports.status();

  auto join = [](const std::vector<int>& ports) {
    return absl::StrJoin(ports, ",", [](std::string* out, int port) {
      absl::StrAppend(out, "127.0.0.1:", port);
    });
  };
  std::vector<std::string> argv = server_argv(options.coordinator_bin, "coordinator");
  argv.push_back("--ps=" + join(*ps_ports));
  argv.push_back("--workers=" + join(*worker_ports));
  auto coordinator = cluster->Launch("coordinator", std::move(argv));
  if (!coordinator.ok()) return coordinator.status();
  cluster->coordinator_ = *coordinator;
  auto coordinator_port = cluster->WaitForPorts({cluster->coordinator_});
  if (!coordinator_port.ok()) return coordinator_port.status();
  cluster->coordinator_address_ = absl::StrCat("127.0.0.1:", (*coordinator_port)[0]);
  return cluster;
}

LocalCluster::~LocalCluster() { Stop(); }

absl::StatusOr<ChildProcess*> LocalCluster::Launch(const std::string& name,
                                                   std::vector<std::string> argv) {
  // A stale port file from an earlier run in the same --run_dir would be
  // mistaken for this child's.
  unlink(PortFile(options_.run_dir, name).c_str());
  SpawnOptions spawn;
  spawn.name = name;
  spawn.argv = std::move(argv);
  spawn.log_path = absl::StrCat(options_.run_dir, "/", name, ".log");
  auto child = ChildProcess::Spawn(spawn);
  if (!child.ok()) {
    return absl::Status(child.status().code(),
                        absl::StrCat("cannot start ", name, ": ", child.status().message()));
  }
  children_.push_back(std::move(*child));
  reported_.push_back(false);
  return children_.back().get();
}

absl::StatusOr<std::vector<int>> LocalCluster::WaitForPorts(
    const std::vector<ChildProcess*>& children) {
  std::vector<int> ports(children.size(), 0);
  const absl::Time deadline = absl::Now() + options_.start_timeout;
  for (;;) {
    bool all = true;
    for (size_t i = 0; i < children.size(); ++i) {
      if (ports[i] != 0) continue;
      ChildProcess* child = children[i];
      absl::StatusOr<int> port = ReadPortFile(PortFile(options_.run_dir, child->name()));
      if (port.ok()) {
        ports[i] = *port;
        continue;
      }
      if (port.status().code() != absl::StatusCode::kNotFound) return port.status();
      if (!child->IsRunning()) {
        return absl::AbortedError(WithLogTail(
            absl::StrCat(child->name(), " ", child->DescribeState(), " before serving"), *child));
      }
      all = false;
    }
    if (all) return ports;
    if (options_.interrupted && options_.interrupted()) {
      return absl::CancelledError("interrupted while starting the local cluster");
    }
    if (absl::Now() >= deadline) {
      for (size_t i = 0; i < children.size(); ++i) {
        if (ports[i] != 0) continue;
        return absl::DeadlineExceededError(WithLogTail(
            absl::StrCat(children[i]->name(), " did not write its port file within ",
                         absl::FormatDuration(options_.start_timeout)),
            *children[i]));
      }
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
}

ClusterPids LocalCluster::pids() const {
  ClusterPids pids;
  for (const ChildProcess* c : ps_) pids.ps.push_back(c->pid());
  for (const ChildProcess* c : workers_) pids.worker.push_back(c->pid());
  if (coordinator_ != nullptr) pids.coordinator = coordinator_->pid();
  return pids;
}

std::vector<ChildProcess*> LocalCluster::CollectExited() {
  std::vector<ChildProcess*> exited;
  for (size_t i = 0; i < children_.size(); ++i) {
    if (reported_[i] || children_[i]->IsRunning()) continue;
    reported_[i] = true;
    exited.push_back(children_[i].get());
  }
  return exited;
}

void LocalCluster::Stop(absl::Duration grace) {
  // The coordinator first, so it does not see workers vanish mid-job.
  if (coordinator_ != nullptr) StopAll({coordinator_}, grace);
  std::vector<ChildProcess*> rest;
  for (auto& c : children_) rest.push_back(c.get());
  StopAll(rest, grace);
}

}  // namespace pscluster
