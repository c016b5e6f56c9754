// SIGINT and SIGTERM, the signals a supervisor (psctl local, Kubernetes,
// docker) stops a process with: blocked in every thread and waited for in
// one, so that servers and psctl shut down cleanly.
#ifndef PSCLUSTER_COMMON_TERMINATION_SIGNALS_H_
#define PSCLUSTER_COMMON_TERMINATION_SIGNALS_H_

#include <signal.h>

#include <functional>

namespace pscluster {

// {SIGINT, SIGTERM}.
sigset_t TerminationSignals();

// Blocks SIGINT/SIGTERM in the calling thread; call first in main, before any
// thread starts, so that every thread inherits the mask.
void BlockTerminationSignals();

// Waits for SIGINT or SIGTERM and returns it. REQUIRES:
// BlockTerminationSignals() was called.
int WaitForTerminationSignal();

// A pending SIGINT/SIGTERM, consumed, or 0 if none is pending; never waits.
// REQUIRES: both are blocked in every thread (BlockTerminationSignals first
// in main, or pthread_sigmask before any thread starts).
int TakePendingTerminationSignal();

// Blocks SIGINT/SIGTERM in the calling thread (call first in main, before any
// thread starts), then waits for one in a background thread and calls
// `on_signal` once.
void OnTerminationSignal(std::function<void()> on_signal);

}  // namespace pscluster

#endif  // PSCLUSTER_COMMON_TERMINATION_SIGNALS_H_
