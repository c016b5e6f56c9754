#include "api/pscluster/test_servers.h"

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace pscluster {
namespace {

// A file of the test's runfiles (the workspace is "pscluster").
std::string Runfile(const std::string& path) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  return absl::StrCat(srcdir != nullptr ? srcdir : ".", "/",
                      workspace != nullptr ? workspace : "pscluster", "/", path);
}

// The "HOST:PORT" of the first "listening on HOST:PORT" in `path`; "" if
// none yet.
std::string ListeningAddress(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const size_t at = line.find("listening on ");
    if (at == std::string::npos) continue;
    std::istringstream rest(line.substr(at + 13));
    std::string address;
    rest >> address;
    return address;
  }
  return "";
}

}  // namespace

TestServers::TestServers(std::string dir) : dir_(std::move(dir)) {
  root_ = dir_ + "/ckpt";
  std::filesystem::create_directories(root_);
}

TestServers::~TestServers() {
  for (auto& [name, child] : children_) child->Stop(absl::ZeroDuration());
}

absl::StatusOr<std::string> TestServers::Start(const std::string& name, const std::string& log,
                                               std::vector<std::string> argv) {
  SpawnOptions spawn;
  spawn.name = name;
  spawn.argv = std::move(argv);
  spawn.log_path = absl::StrCat(dir_, "/", log);
  absl::StatusOr<std::unique_ptr<ChildProcess>> child = ChildProcess::Spawn(spawn);
  if (!child.ok()) return child.status();
  ChildProcess* c = child->get();
  children_[name] = *std::move(child);
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (absl::Now() < deadline) {
    const std::string address = ListeningAddress(spawn.log_path);
    if (!address.empty()) return address;
    if (!c->IsRunning()) {
      return absl::AbortedError(absl::StrCat(name, " ", c->DescribeState(), ": ",
                                             c->LogTail(20)));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return absl::DeadlineExceededError(absl::StrCat(name, " did not listen within 30 s: ",
                                                  c->LogTail(20)));
}

absl::StatusOr<std::string> TestServers::StartPs(int index) {
  const std::string name = absl::StrCat("ps", index);
  absl::StatusOr<std::string> address =
      Start(name, name + ".log",
            {Runfile("ps/ps_server"), "--address=127.0.0.1:0", "--checkpoint_root=" + root_});
  if (address.ok()) ps_address_[index] = *address;
  return address;
}

absl::StatusOr<std::string> TestServers::StartWorker(int index) {
  const std::string name = absl::StrCat("worker", index);
  return Start(name, name + ".log",
               {Runfile("api/recovery_test_worker"), "--address=127.0.0.1:0",
                "--compute_threads=1"});
}

void TestServers::KillPs(int index) {
  auto it = children_.find(absl::StrCat("ps", index));
  if (it == children_.end()) return;
  it->second->Signal(SIGKILL);
  it->second->WaitFor(absl::Seconds(10));
}

absl::StatusOr<std::string> TestServers::RestartPs(int index) {
  const std::string name = absl::StrCat("ps", index);
  const std::string address = ps_address_[index];
  return Start(name, absl::StrCat(name, ".restart", ++restarts_, ".log"),
               {Runfile("ps/ps_server"), "--address=" + address, "--checkpoint_root=" + root_});
}

}  // namespace pscluster
