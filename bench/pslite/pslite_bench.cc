// pslite_bench: ps-lite's dense push+pull throughput, the ps-lite column of
// bench/data_plane_bench (bench/README.md, "The ps-lite column").
//
// Not a Bazel target: ps-lite is not in the Bazel workspace. It is compiled
// against an out-of-tree ps-lite build by bench/pslite/build_pslite.sh.
//
// One binary, three roles:
//
//   pslite_bench launch --servers=P --workers=W
//     The launcher. Starts a ps-lite cluster on 127.0.0.1 (a scheduler, P
//     servers and W workers, each a child process of this binary with the
//     DMLC_* variables ps-lite reads), prints "ready", then answers one
//     command per line on stdin:
//       run <mode> <bytes> <seconds> <min_iterations> <max_iterations>
//         -> "ok <GB/s> <fewest round trips of any worker>" or "error <text>"
//       quit -> stops the cluster and exits.
//     <mode> is "push_pull" (ZPush, wait, then ZPull, wait: two round trips)
//     or "fused" (ZPushPull, wait: one). GB/s = 2 * bytes * round trips,
//     summed over the workers, over the time from a common start until the
//     last worker finished (1 GB = 1e9 B), as data_plane_bench counts it.
//
//   DMLC_ROLE=scheduler|server pslite_bench
//     A ps-lite node (started by the launcher). A server keeps one float32
//     vector per key and applies plain SGD (w -= lr * g) to each push; it
//     answers a pull with a copy of the vector taken in its request handler
//     (a consistent snapshot, as pscluster's PS answers).
//
//   DMLC_ROLE=worker pslite_bench
//     A worker (started by the launcher): reads "run ..." lines with a start
//     time on the steady clock, runs round trips until the deadline, answers
//     "done <round trips> <end time>".
//
// A variable of N bytes is one key per server (the first key of each
// server's key range, offset by N so every size has its own keys) holding
// N/P bytes (rounded down to 4 bytes): ps-lite slices a request by key range
// and sends every server its slice at once, then waits for all of them.
//
// Example by hand:
//   printf 'run fused 4194304 1 1 100000\nquit\n' | pslite_bench launch --servers=1 --workers=1
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "ps/ps.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr float kLearningRate = 0.01f;

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

// ---------------------------------------------------------------------------
// Server: SGD on one float vector per key.

class SgdServer {
 public:
  void Handle(const ps::KVMeta& meta, const ps::KVPairs<float>& request,
              ps::KVServer<float>* server) {
    const size_t n = request.keys.size();
    ps::KVPairs<float> response;
    size_t offset = 0;
    if (meta.push) {
      for (size_t i = 0; i < n; ++i) {
        const size_t len = request.lens.empty() ? request.vals.size() / n
                                                : static_cast<size_t>(request.lens[i]);
        std::vector<float>& w = store_[request.keys[i]];
        if (w.size() != len) w.assign(len, 0.0f);  // First push creates it (zeros).
        const float* g = request.vals.data() + offset;
        float* wp = w.data();
        for (size_t j = 0; j < len; ++j) wp[j] -= kLearningRate * g[j];
        offset += len;
      }
    }
    if (meta.pull) {
      size_t total = 0;
      for (size_t i = 0; i < n; ++i) total += store_[request.keys[i]].size();
      response.keys = request.keys;
      response.lens.resize(n);
      response.vals.resize(total);
      float* out = response.vals.data();
      for (size_t i = 0; i < n; ++i) {
        const std::vector<float>& w = store_[request.keys[i]];
        std::memcpy(out, w.data(), w.size() * sizeof(float));
        out += w.size();
        response.lens[i] = static_cast<int>(w.size());
      }
    }
    server->Response(meta, response);
  }

 private:
  // Only the server's one customer thread calls Handle.
  std::unordered_map<ps::Key, std::vector<float>> store_;
};

// ---------------------------------------------------------------------------
// Worker.

// One size's requests, built once and reused (ZPush/ZPull/ZPushPull do not
// copy them).
struct Variable {
  ps::SArray<ps::Key> keys;
  ps::SArray<int> lens;
  ps::SArray<int> out_lens;  // Written by each answer (the same values).
  ps::SArray<float> gradient;
  ps::SArray<float> pulled;
  int64_t bytes = 0;  // Sent per round trip (N less rounding).
};

Variable* GetVariable(int64_t bytes, std::map<int64_t, std::unique_ptr<Variable>>* variables) {
  auto it = variables->find(bytes);
  if (it != variables->end()) return it->second.get();
  auto v = std::make_unique<Variable>();
  const std::vector<ps::Range>& ranges = ps::Postoffice::Get()->GetServerKeyRanges();
  const int64_t shard_floats = bytes / static_cast<int64_t>(ranges.size()) / 4;
  for (const ps::Range& range : ranges) {
    v->keys.push_back(range.begin() + static_cast<ps::Key>(bytes));
    v->lens.push_back(static_cast<int>(shard_floats));
  }
  // ZPushPull sends its lens with the gradient and writes the answer's lens
  // back into the same array: a copy of `lens`, not `lens` itself.
  v->out_lens.CopyFrom(v->lens);
  v->gradient.resize(static_cast<size_t>(shard_floats) * ranges.size(), 1e-3f);
  v->pulled.resize(v->gradient.size(), 0.0f);
  v->bytes = shard_floats * 4 * static_cast<int64_t>(ranges.size());
  Variable* raw = v.get();
  (*variables)[bytes] = std::move(v);
  return raw;
}

void RunWorker() {
  ps::KVWorker<float> kv(0, 0);
  std::map<int64_t, std::unique_ptr<Variable>> variables;
  std::cout << "ready" << std::endl;
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::string command, mode;
    int64_t bytes = 0, start_ns = 0, min_iterations = 1, max_iterations = 1;
    double seconds = 0;
    in >> command;
    if (command == "quit") break;
    if (command != "run" ||
        !(in >> mode >> bytes >> start_ns >> seconds >> min_iterations >> max_iterations) ||
        (mode != "fused" && mode != "push_pull") || bytes < 4) {
      std::cout << "error bad command: " << line << std::endl;
      continue;
    }
    Variable* v = GetVariable(bytes, &variables);
    const int64_t deadline_ns = start_ns + static_cast<int64_t>(seconds * 1e9);
    while (NowNs() < start_ns) {
    }
    int64_t n = 0;
    int64_t now = NowNs();
    do {
      if (mode == "fused") {
        kv.Wait(kv.ZPushPull(v->keys, v->gradient, &v->pulled, &v->out_lens));
      } else {
        kv.Wait(kv.ZPush(v->keys, v->gradient, v->lens));
        kv.Wait(kv.ZPull(v->keys, &v->pulled, &v->out_lens));
      }
      ++n;
      now = NowNs();
    } while (n < max_iterations && (now < deadline_ns || n < min_iterations));
    std::cout << "done " << n << " " << now << " " << v->bytes << std::endl;
  }
}

// ---------------------------------------------------------------------------
// Launcher.

struct Child {
  pid_t pid = -1;
  FILE* to = nullptr;    // Its stdin (workers only).
  FILE* from = nullptr;  // Its stdout (workers only).
};

int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    perror("pslite_bench: free port");
    exit(1);
  }
  close(fd);
  return ntohs(addr.sin_port);
}

// Starts this binary as a ps-lite node. Workers get pipes on stdin/stdout;
// the others' stdout goes to stderr so the launcher's stdout stays its own.
Child Spawn(const char* role, int servers, int workers, int port) {
  int to_child[2] = {-1, -1}, from_child[2] = {-1, -1};
  const bool worker = std::strcmp(role, "worker") == 0;
  if (worker && (pipe(to_child) != 0 || pipe(from_child) != 0)) {
    perror("pslite_bench: pipe");
    exit(1);
  }
  const pid_t pid = fork();
  if (pid < 0) {
    perror("pslite_bench: fork");
    exit(1);
  }
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (worker) {
      dup2(to_child[0], 0);
      dup2(from_child[1], 1);
      close(to_child[0]);
      close(to_child[1]);
      close(from_child[0]);
      close(from_child[1]);
    } else {
      const int devnull = open("/dev/null", O_RDONLY);
      dup2(devnull, 0);
      dup2(2, 1);
    }
    setenv("DMLC_ROLE", role, 1);
    setenv("DMLC_NUM_SERVER", std::to_string(servers).c_str(), 1);
    setenv("DMLC_NUM_WORKER", std::to_string(workers).c_str(), 1);
    setenv("DMLC_PS_ROOT_URI", "127.0.0.1", 1);
    setenv("DMLC_PS_ROOT_PORT", std::to_string(port).c_str(), 1);
    setenv("DMLC_NODE_HOST", "127.0.0.1", 1);
    unsetenv("DMLC_LOCAL");  // TCP over loopback, as the other columns.
    execl("/proc/self/exe", "pslite_bench", static_cast<char*>(nullptr));
    perror("pslite_bench: exec");
    _exit(127);
  }
  Child c;
  c.pid = pid;
  if (worker) {
    close(to_child[0]);
    close(from_child[1]);
    c.to = fdopen(to_child[1], "w");
    c.from = fdopen(from_child[0], "r");
  }
  return c;
}

bool ReadLine(FILE* f, std::string* line) {
  line->clear();
  int ch;
  while ((ch = fgetc(f)) != EOF && ch != '\n') line->push_back(static_cast<char>(ch));
  return ch != EOF || !line->empty();
}

int Launch(int servers, int workers) {
  const int port = FreePort();
  std::vector<Child> nodes;
  nodes.push_back(Spawn("scheduler", servers, workers, port));
  for (int i = 0; i < servers; ++i) nodes.push_back(Spawn("server", servers, workers, port));
  std::vector<Child> worker_nodes;
  for (int i = 0; i < workers; ++i) worker_nodes.push_back(Spawn("worker", servers, workers, port));
  std::string line;
  for (Child& w : worker_nodes) {
    if (!ReadLine(w.from, &line) || line != "ready") {
      std::cout << "error a worker did not start: " << line << std::endl;
      return 1;
    }
  }
  std::cout << "ready" << std::endl;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::string command, mode;
    int64_t bytes = 0, min_iterations = 1, max_iterations = 1;
    double seconds = 0;
    in >> command;
    if (command == "quit") break;
    if (command != "run" || !(in >> mode >> bytes >> seconds >> min_iterations >> max_iterations)) {
      std::cout << "error bad command: " << line << std::endl;
      continue;
    }
    // A common start a little ahead, so every worker has read its command.
    const int64_t start_ns = NowNs() + 20 * 1000 * 1000;
    for (Child& w : worker_nodes) {
      fprintf(w.to, "run %s %lld %lld %.9g %lld %lld\n", mode.c_str(),
              static_cast<long long>(bytes), static_cast<long long>(start_ns), seconds,
              static_cast<long long>(min_iterations), static_cast<long long>(max_iterations));
      fflush(w.to);
    }
    int64_t round_trips = 0, fewest = -1, last_end = start_ns, sent = 0;
    std::string error;
    for (Child& w : worker_nodes) {
      long long n = 0, end = 0, b = 0;
      if (!ReadLine(w.from, &line) ||
          sscanf(line.c_str(), "done %lld %lld %lld", &n, &end, &b) != 3) {
        error = "worker answered: " + line;
        continue;
      }
      round_trips += n;
      fewest = fewest < 0 ? n : std::min<int64_t>(fewest, n);
      last_end = std::max<int64_t>(last_end, end);
      sent = b;
    }
    if (!error.empty()) {
      std::cout << "error " << error << std::endl;
      break;
    }
    const double elapsed = static_cast<double>(last_end - start_ns) / 1e9;
    const double gbps = 2.0 * static_cast<double>(sent) * static_cast<double>(round_trips) /
                        elapsed / 1e9;
    std::cout << "ok " << gbps << " " << fewest << std::endl;
  }
  for (Child& w : worker_nodes) {
    fprintf(w.to, "quit\n");
    fclose(w.to);
  }
  int rc = 0;
  for (Child& w : worker_nodes) nodes.push_back(w);
  for (Child& c : nodes) {
    int status = 0;
    waitpid(c.pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) rc = 1;
  }
  return rc;
}

}  // namespace

int main(int argc, char* argv[]) {
  if (argc >= 2 && std::strcmp(argv[1], "launch") == 0) {
    int servers = 1, workers = 1;
    for (int i = 2; i < argc; ++i) {
      if (std::sscanf(argv[i], "--servers=%d", &servers) == 1) continue;
      if (std::sscanf(argv[i], "--workers=%d", &workers) == 1) continue;
      std::cerr << "pslite_bench: unknown argument " << argv[i] << "\n";
      return 2;
    }
    if (servers < 1 || workers < 1) {
      std::cerr << "pslite_bench: need --servers >= 1 and --workers >= 1\n";
      return 2;
    }
    return Launch(servers, workers);
  }
  const char* role = std::getenv("DMLC_ROLE");
  if (role == nullptr) {
    std::cerr << "usage: pslite_bench launch --servers=P --workers=W  (commands on stdin; see "
                 "the header of bench/pslite/pslite_bench.cc)\n";
    return 2;
  }
  ps::Start(0);
  std::unique_ptr<ps::KVServer<float>> server;
  SgdServer sgd;
  if (ps::IsServer()) {
    server = std::make_unique<ps::KVServer<float>>(0);
    server->set_request_handle(
        [&sgd](const ps::KVMeta& meta, const ps::KVPairs<float>& request,
               ps::KVServer<float>* s) { sgd.Handle(meta, request, s); });
  }
  if (ps::IsWorker()) RunWorker();
  ps::Finalize(0, true);
  return 0;
}
