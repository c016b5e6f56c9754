// A floor under the stack size of threads that libraries create with an
// explicit, small stack.
//
// Debian's civetweb (the HTTP server under prometheus::Exposer) is built with
// USE_STACK_SIZE=102400 and calls pthread_attr_setstacksize(100 KiB) for
// every thread it starts; neither civetweb nor prometheus-cpp has a run-time
// option for it. glibc carves a thread's static TLS out of that stack and
// refuses to create the thread (EINVAL) when the TLS does not fit, and a
// worker linking OpenBLAS and cuBLAS has about 169 KiB of static TLS: the
// Exposer then fails with "null context when constructing CivetServer".
//
// Defining pthread_attr_setstacksize in the executable interposes it on every
// shared library's calls (the binary exports it: see :thread_stack's
// linkopts). Requests below kMinThreadStackBytes are raised to it; larger
// ones, and callers that use the default stack, are untouched. Thread stacks
// are reserved address space, so the few civetweb threads cost no memory
// until used.
#include <dlfcn.h>
#include <pthread.h>

#include <cstddef>

namespace {

constexpr size_t kMinThreadStackBytes = size_t{2} << 20;  // 2 MiB

using SetStackSizeFn = int (*)(pthread_attr_t*, size_t);

SetStackSizeFn RealSetStackSize() {
  static const SetStackSizeFn real =
      reinterpret_cast<SetStackSizeFn>(dlsym(RTLD_NEXT, "pthread_attr_setstacksize"));
  return real;
}

}  // namespace

extern "C" int pthread_attr_setstacksize(pthread_attr_t* attr, size_t stacksize) {
  SetStackSizeFn real = RealSetStackSize();
  if (real == nullptr) return 0;  // keep the attr's default size (8 MiB)
  return real(attr, stacksize < kMinThreadStackBytes ? kMinThreadStackBytes : stacksize);
}
