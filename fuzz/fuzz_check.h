// FUZZ_CHECK: the property checks of pscluster's fuzz targets. A failed check
// prints what was expected and aborts, which libFuzzer reports as a crash
// (saving the input) and the standalone replay (standalone_main.cc) as a
// failed test. Used only in fuzz/, never in a library: request input never
// aborts a server (STYLE.md rule 3); a fuzz target asserts that it doesn't.
#ifndef PSCLUSTER_FUZZ_FUZZ_CHECK_H_
#define PSCLUSTER_FUZZ_FUZZ_CHECK_H_

#include <cstdio>
#include <cstdlib>
#include <string>

#define FUZZ_CHECK(cond, message)                                                           \
  do {                                                                                      \
    if (!(cond)) {                                                                          \
      std::fprintf(stderr, "%s:%d: FUZZ_CHECK(%s) failed: %s\n", __FILE__, __LINE__, #cond, \
                   std::string(message).c_str());                                           \
      std::abort();                                                                         \
    }                                                                                       \
  } while (0)

#endif  // PSCLUSTER_FUZZ_FUZZ_CHECK_H_
