#include "client/local_cluster.h"

#include <fcntl.h>
#include <limits.h>
#include <unistd.h>

#include <cstdio>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/update_lease.h"

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

void AppendLine(const std::string& path, const std::string& line) {
  std::ofstream out(path, std::ios::app);
  out << line << "\n";
}

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

absl::Status ResolveServerBinary(std::string* path, const std::string& name,
                                 const std::string& bazel_package, const std::string& flag) {
  if (!path->empty()) {
    if (access(path->c_str(), X_OK) != 0) {
      return absl::NotFoundError(absl::StrCat("--", flag, "=", *path, " is not an executable"));
    }
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> found = FindSiblingBinary(name, bazel_package);
  if (!found.ok()) {
    return absl::NotFoundError(absl::StrCat(found.status().message(), "; pass --", flag));
  }
  *path = *found;
  return absl::OkStatus();
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

absl::Duration RestartDelay(const RestartPolicy& policy, int attempt) {
  absl::Duration delay = policy.initial_backoff;
  for (int i = 1; i < attempt && delay < policy.max_backoff; ++i) delay *= 2;
  return std::min(delay, policy.max_backoff);
}

absl::StatusOr<bool> BinaryHasFlag(const std::string& bin, const std::string& flag,
                                   const std::string& scratch_path, absl::Duration timeout) {
  auto child = ChildProcess::Spawn({"help", {bin, "--helpfull"}, scratch_path});
  if (!child.ok()) return child.status();
  if (!(*child)->WaitFor(timeout)) {
    (*child)->Stop(absl::ZeroDuration());
    return absl::DeadlineExceededError(
        absl::StrCat(bin, " --helpfull did not exit within ", absl::FormatDuration(timeout)));
  }
  std::ifstream in(scratch_path);
  const std::string help(std::istreambuf_iterator<char>(in), {});
  // absl lists flags as "-name (help); default: ...".
  return help.find(absl::StrCat("-", flag, " ")) != std::string::npos;
}

namespace {

// Writes RUN_DIR/join_token (a fresh random secret, mode 0600) and passes it
// to the coordinator if it knows --join_token_file. Returns the file, or ""
// when the coordinator takes no registrations (or the file cannot be made).
std::string AddJoinToken(const LocalClusterOptions& options, std::vector<std::string>* flags) {
  const std::string scratch = options.run_dir + "/join_token.helpfull";
  absl::StatusOr<bool> has = BinaryHasFlag(options.coordinator_bin, "join_token_file", scratch);
  unlink(scratch.c_str());
  if (!has.ok() || !*has) return "";
  const std::string path = options.run_dir + "/join_token";
  unlink(path.c_str());
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
  if (fd < 0) return "";
  const std::string token = absl::BytesToHexString(RandomSecret()) + "\n";
  const bool written = write(fd, token.data(), token.size()) == static_cast<ssize_t>(token.size());
  close(fd);
  if (!written) return "";
  flags->push_back("--join_token_file=" + path);
  return path;
}

}  // namespace

absl::StatusOr<std::unique_ptr<LocalCluster>> LocalCluster::Start(
    const LocalClusterOptions& options) {
  if (options.num_ps < 0 || options.num_workers < 1) {
    return absl::InvalidArgumentError(absl::StrCat("a local cluster needs at least one worker ",
                                                   "and no negative number of ps, got --ps ",
                                                   options.num_ps, " --workers ",
                                                   options.num_workers));
  }
  std::unique_ptr<LocalCluster> cluster(new LocalCluster());
  cluster->options_ = options;
  std::vector<Slot>& slots = cluster->slots_;
  auto add = [&](std::string name, const std::string& bin) {
    slots.emplace_back();
    slots.back().name = std::move(name);
    slots.back().bin = bin;
  };
  for (int i = 0; i < options.num_ps; ++i) {
    add(absl::StrCat("ps-", i), options.ps_server_bin);
    slots.back().flags = options.ps_flags;
    slots.back().flags.insert(slots.back().flags.end(), options.server_flags.begin(),
                              options.server_flags.end());
  }
  for (int i = 0; i < options.num_workers; ++i) {
    if (options.worker_command.empty()) {
      add(absl::StrCat("worker-", i), options.worker_server_bin);
    } else {
      add(absl::StrCat("worker-", i), options.worker_command[0]);
      slots.back().bin_args.assign(options.worker_command.begin() + 1,
                                   options.worker_command.end());
    }
    slots.back().flags = options.worker_flags;
    slots.back().flags.insert(slots.back().flags.end(), options.server_flags.begin(),
                              options.server_flags.end());
  }
  add("coordinator", options.coordinator_bin);
  const size_t servers = slots.size() - 1;
  Slot& coordinator = slots.back();

  // PS and workers start together; the coordinator needs all their ports.
  for (size_t i = 0; i < servers; ++i) {
    if (absl::Status s = cluster->Launch(&slots[i], /*restart=*/false); !s.ok()) return s;
  }
  if (absl::Status s = cluster->WaitForPorts(0, options.num_ps); !s.ok()) return s;
  if (absl::Status s = cluster->WaitForPorts(options.num_ps, servers); !s.ok()) return s;

  auto join = [&](size_t begin, size_t end) {
    std::vector<std::string> addresses;
    for (size_t i = begin; i < end; ++i) {
      addresses.push_back(absl::StrCat("127.0.0.1:", slots[i].port));
    }
    return absl::StrJoin(addresses, ",");
  };
  coordinator.flags.clear();
  if (options.num_ps > 0) coordinator.flags.push_back("--ps=" + join(0, options.num_ps));
  coordinator.flags.push_back("--workers=" + join(options.num_ps, servers));
  if (options.job_ps > 0) coordinator.flags.push_back(absl::StrCat("--job_ps=", options.job_ps));
  coordinator.flags.insert(coordinator.flags.end(), options.coordinator_flags.begin(),
                           options.coordinator_flags.end());
  coordinator.flags.insert(coordinator.flags.end(), options.server_flags.begin(),
                           options.server_flags.end());
  // Elastic workers (docs/elastic_workers.md): a join token in the run
  // directory, so that workers started by hand may join the running job.
  const std::string join_token = AddJoinToken(options, &coordinator.flags);
  if (absl::Status s = cluster->Launch(&coordinator, /*restart=*/false); !s.ok()) return s;
  if (absl::Status s = cluster->WaitForPorts(servers, slots.size()); !s.ok()) return s;
  cluster->coordinator_address_ = absl::StrCat("127.0.0.1:", coordinator.port);
  if (!join_token.empty()) {
    std::fprintf(stderr,
                 "psctl: workers may join: %s --coordinator=%s --join_token_file=%s "
                 "--address=127.0.0.1:0 [--data_root=...]; SIGTERM one to remove it\n",
                 options.worker_server_bin.c_str(), cluster->coordinator_address_.c_str(),
                 join_token.c_str());
  }
  return cluster;
}

LocalCluster::~LocalCluster() { Stop(); }

absl::Status LocalCluster::Launch(Slot* slot, bool restart) {
  const std::string port_file = PortFile(options_.run_dir, slot->name);
  // A stale port file (an earlier run in the same --run_dir, or the dead
  // process) would be mistaken for this process's.
  unlink(port_file.c_str());
  SpawnOptions spawn;
  spawn.name = slot->name;
  spawn.argv = {slot->bin};
  spawn.argv.insert(spawn.argv.end(), slot->bin_args.begin(), slot->bin_args.end());
  spawn.argv.push_back(absl::StrCat("--address=127.0.0.1:", slot->port));
  spawn.argv.push_back("--port_file=" + port_file);
  if (options_.metrics) {
    spawn.argv.push_back(absl::StrCat("--metrics_address=127.0.0.1:", slot->metrics_port));
  }
  spawn.argv.insert(spawn.argv.end(), slot->flags.begin(), slot->flags.end());
  spawn.log_path = absl::StrCat(options_.run_dir, "/", slot->name, ".log");
  spawn.append_log = restart;
  if (restart) AppendLine(spawn.log_path, "--- restarted ---");
  auto child = ChildProcess::Spawn(spawn);
  if (!child.ok()) {
    return absl::Status(child.status().code(), absl::StrCat("cannot start ", slot->name, ": ",
                                                            child.status().message()));
  }
  slot->process = std::move(*child);
  slot->started = absl::Now();
  return absl::OkStatus();
}

absl::Status LocalCluster::WaitForPorts(size_t begin, size_t end) {
  const absl::Time deadline = absl::Now() + options_.start_timeout;
  for (;;) {
    bool all = true;
    for (size_t i = begin; i < end; ++i) {
      Slot& slot = slots_[i];
      if (slot.port != 0) continue;
      absl::StatusOr<int> port = ReadPortFile(PortFile(options_.run_dir, slot.name));
      if (port.ok() && options_.metrics) {
        // Written before the port file (StartServer).
        absl::StatusOr<int> metrics_port =
            ReadPortFile(PortFile(options_.run_dir, slot.name) + ".metrics");
        if (!metrics_port.ok()) {
          return absl::Status(metrics_port.status().code(),
                              absl::StrCat(slot.name, " serves no metrics: ",
                                           metrics_port.status().message()));
        }
        slot.metrics_port = *metrics_port;
      }
      if (port.ok()) {
        slot.port = *port;
        continue;
      }
      if (port.status().code() != absl::StatusCode::kNotFound) return port.status();
      ChildProcess& child = *slot.process;
      if (!child.IsRunning()) {
        return absl::AbortedError(WithLogTail(
            absl::StrCat(slot.name, " ", child.DescribeState(), " before serving"), child));
      }
      all = false;
    }
    if (all) return absl::OkStatus();
    if (options_.interrupted && options_.interrupted()) {
      return absl::CancelledError("interrupted while starting the local cluster");
    }
    if (absl::Now() >= deadline) {
      for (size_t i = begin; i < end; ++i) {
        if (slots_[i].port != 0) continue;
        return absl::DeadlineExceededError(WithLogTail(
            absl::StrCat(slots_[i].name, " did not write its port file within ",
                         absl::FormatDuration(options_.start_timeout)),
            *slots_[i].process));
      }
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
}

ClusterPids LocalCluster::pids() const {
  ClusterPids pids;
  for (int i = 0; i < options_.num_ps; ++i) pids.ps.push_back(slots_[i].process->pid());
  for (int i = 0; i < options_.num_workers; ++i) {
    pids.worker.push_back(slots_[options_.num_ps + i].process->pid());
  }
  pids.coordinator = slots_.back().process->pid();
  return pids;
}

std::optional<ClusterMetricsAddresses> LocalCluster::metrics_addresses() const {
  if (!options_.metrics) return std::nullopt;
  auto address = [](const Slot& slot) { return absl::StrCat("127.0.0.1:", slot.metrics_port); };
  ClusterMetricsAddresses m;
  for (int i = 0; i < options_.num_ps; ++i) m.ps.push_back(address(slots_[i]));
  for (int i = 0; i < options_.num_workers; ++i) {
    m.worker.push_back(address(slots_[options_.num_ps + i]));
  }
  m.coordinator = address(slots_.back());
  return m;
}

std::map<std::string, int> LocalCluster::restarts() const {
  std::map<std::string, int> restarts;
  for (const Slot& slot : slots_) restarts[slot.name] = slot.restarts;
  return restarts;
}

std::vector<ChildEvent> LocalCluster::Poll() {
  std::vector<ChildEvent> events;
  if (stopped_) return events;
  const absl::Time now = absl::Now();
  for (Slot& slot : slots_) PollSlot(&slot, now, &events);
  return events;
}

void LocalCluster::PollSlot(Slot* slot, absl::Time now, std::vector<ChildEvent>* events) {
  if (slot->given_up) return;
  ChildEvent event;
  event.name = slot->name;
  event.log_path = slot->process->log_path();
  if (!slot->restart_at) {
    if (slot->process->IsRunning()) return;
    slot->dead_pid = slot->process->pid();
    slot->dead_how = slot->process->DescribeState();
    if (now - slot->started >= options_.restart.reset_after) slot->consecutive = 0;
    const RestartPolicy& policy = options_.restart;
    if (!policy.enabled || slot->consecutive >= policy.max_consecutive) {
      slot->given_up = true;
      event.kind = ChildEvent::Kind::kExited;
      event.pid = slot->dead_pid;
      event.how = slot->dead_how;
      event.reason = policy.enabled
                         ? absl::StrCat("gave up after ", slot->consecutive,
                                        " restarts in a row that did not stay up ",
                                        absl::FormatDuration(policy.reset_after))
                         : "restarts are off";
      events->push_back(std::move(event));
      return;
    }
    slot->restart_at = now + RestartDelay(policy, slot->consecutive + 1);
  }
  if (now < *slot->restart_at) return;
  slot->restart_at.reset();
  ++slot->consecutive;
  if (absl::Status s = Launch(slot, /*restart=*/true); !s.ok()) {
    // The binary went away: count it as a failed restart and try again.
    slot->started = now;
    slot->dead_how = std::string(s.message());
    slot->restart_at = now + RestartDelay(options_.restart, slot->consecutive + 1);
    if (slot->consecutive >= options_.restart.max_consecutive) {
      slot->given_up = true;
      event.kind = ChildEvent::Kind::kExited;
      event.pid = slot->dead_pid;
      event.how = slot->dead_how;
      event.reason = absl::StrCat("gave up after ", slot->consecutive, " failed restarts");
      events->push_back(std::move(event));
    }
    return;
  }
  ++slot->restarts;
  event.kind = ChildEvent::Kind::kRestarted;
  event.pid = slot->dead_pid;
  event.how = slot->dead_how;
  event.new_pid = slot->process->pid();
  events->push_back(std::move(event));
}

void LocalCluster::Stop(absl::Duration grace) {
  stopped_ = true;
  // The coordinator first, so it does not see workers vanish mid-job.
  if (!slots_.empty() && slots_.back().process) StopAll({slots_.back().process.get()}, grace);
  std::vector<ChildProcess*> rest;
  for (Slot& slot : slots_) {
    if (slot.process) rest.push_back(slot.process.get());
  }
  StopAll(rest, grace);
}

}  // namespace pscluster
