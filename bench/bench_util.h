// Small helpers shared by the bench/ binaries: medians, the machine line
// (CPU model, date) every published figure carries, and JSON string quoting.
// Benchmarks print markdown tables and write JSON by hand: their output is a
// few flat records, so a JSON library would add a dependency for nothing.
//
// Pure functions; thread-safe.
#ifndef PSCLUSTER_BENCH_BENCH_UTIL_H_
#define PSCLUSTER_BENCH_BENCH_UTIL_H_

#include <cstdint>
#include <string>
#include <vector>

namespace pscluster {
namespace bench {

// Median of `v` (mean of the two middle values for an even count).
// REQUIRES: !v.empty().
double Median(std::vector<double> v);

// The q-quantile of *v (reordered in place). REQUIRES: !v->empty().
double Percentile(std::vector<double>* v, double q);

// "4 KiB", "16 MiB", or "N B" for sizes that are not whole KiB / MiB.
std::string SizeLabel(int64_t bytes);

// The first "model name" of /proc/cpuinfo, or "unknown".
std::string CpuModel();

// The current UTC time as 2026-11-30T12:00:00Z.
std::string UtcNow();

// `s` as a JSON string literal, quotes included.
std::string JsonString(const std::string& s);

// `x` with 6 significant digits, or null if it is not finite (NaN marks a
// path that was not measured; JSON has no NaN).
std::string JsonNumber(double x);

// `v` as a JSON array of numbers with 6 significant digits (JsonNumber).
std::string JsonNumbers(const std::vector<double>& v);

}  // namespace bench
}  // namespace pscluster

#endif  // PSCLUSTER_BENCH_BENCH_UTIL_H_
