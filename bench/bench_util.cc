#include "bench/bench_util.h"

#include <algorithm>
#include <cmath>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace pscluster {
namespace bench {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double Percentile(std::vector<double>* v, double q) {
  const size_t i = std::min(v->size() - 1, static_cast<size_t>(q * v->size()));
  std::nth_element(v->begin(), v->begin() + i, v->end());
  return (*v)[i];
}

std::string SizeLabel(int64_t bytes) {
  if (bytes >= (1 << 20) && bytes % (1 << 20) == 0) return absl::StrCat(bytes >> 20, " MiB");
  if (bytes >= (1 << 10) && bytes % (1 << 10) == 0) return absl::StrCat(bytes >> 10, " KiB");
  return absl::StrCat(bytes, " B");
}

std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(" \t", colon + 1));
    }
  }
  return "unknown";
}

std::string UtcNow() {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::Now(), absl::UTCTimeZone());
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += absl::StrFormat("\\u%04x", c);
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string JsonNumber(double x) {
  return std::isfinite(x) ? absl::StrFormat("%.6g", x) : "null";
}

std::string JsonNumbers(const std::vector<double>& v) {
  return absl::StrCat("[",
                      absl::StrJoin(v, ", ",
                                    [](std::string* out, double x) {
                                      absl::StrAppend(out, JsonNumber(x));
                                    }),
                      "]");
}

}  // namespace bench
}  // namespace pscluster
