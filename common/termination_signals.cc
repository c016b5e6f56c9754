#include "common/termination_signals.h"

#include <pthread.h>

#include <thread>
#include <utility>

namespace pscluster {

sigset_t TerminationSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

void BlockTerminationSignals() {
  sigset_t set = TerminationSignals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

int WaitForTerminationSignal() {
  sigset_t set = TerminationSignals();
  int sig = 0;
  sigwait(&set, &sig);
  return sig;
}

int TakePendingTerminationSignal() {
  const sigset_t set = TerminationSignals();
  const timespec zero = {0, 0};
  const int sig = sigtimedwait(&set, nullptr, &zero);
  return sig > 0 ? sig : 0;
}

void OnTerminationSignal(std::function<void()> on_signal) {
  BlockTerminationSignals();
  std::thread([on_signal = std::move(on_signal)]() {
    WaitForTerminationSignal();
    on_signal();
  }).detach();
}

}  // namespace pscluster
