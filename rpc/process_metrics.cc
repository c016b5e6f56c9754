#include "rpc/process_metrics.h"

#include <unistd.h>

#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace pscluster {
namespace {

std::string ReadFile(const char* path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

prometheus::MetricFamily Family(const std::string& name, const std::string& help,
                                prometheus::MetricType type, double value) {
  prometheus::MetricFamily f;
  f.name = name;
  f.help = help;
  f.type = type;
  prometheus::ClientMetric m;
  if (type == prometheus::MetricType::Counter) {
    m.counter.value = value;
  } else {
    m.gauge.value = value;
  }
  f.metric.push_back(m);
  return f;
}

}  // namespace

absl::StatusOr<ProcStat> ParseProcStat(absl::string_view text) {
  const size_t close = text.rfind(')');
  if (close == absl::string_view::npos) {
    return absl::InvalidArgumentError("/proc stat: no ')' after the command name");
  }
  // Fields after the command name start with field 3 (state).
  std::vector<absl::string_view> fields =
      absl::StrSplit(text.substr(close + 1), ' ', absl::SkipWhitespace());
  constexpr size_t kUtime = 14 - 3, kStime = 15 - 3, kStart = 22 - 3;
  ProcStat s;
  if (fields.size() <= kStart || !absl::SimpleAtoi(fields[kUtime], &s.utime_ticks) ||
      !absl::SimpleAtoi(fields[kStime], &s.stime_ticks) ||
      !absl::SimpleAtoi(fields[kStart], &s.start_ticks)) {
    return absl::InvalidArgumentError("/proc stat: malformed utime/stime/starttime");
  }
  return s;
}

absl::StatusOr<int64_t> ParseStatmResidentPages(absl::string_view text) {
  std::vector<absl::string_view> fields = absl::StrSplit(text, ' ', absl::SkipWhitespace());
  int64_t pages = 0;
  if (fields.size() < 2 || !absl::SimpleAtoi(fields[1], &pages)) {
    return absl::InvalidArgumentError("/proc statm: malformed resident field");
  }
  return pages;
}

absl::StatusOr<int64_t> ParseBootTime(absl::string_view text) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (absl::ConsumePrefix(&line, "btime ")) {
      int64_t t = 0;
      if (absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &t)) return t;
    }
  }
  return absl::InvalidArgumentError("/proc/stat: no btime line");
}

std::vector<prometheus::MetricFamily> ProcessMetrics::Collect() const {
  using prometheus::MetricType;
  std::vector<prometheus::MetricFamily> out;
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  absl::StatusOr<ProcStat> stat = ParseProcStat(ReadFile("/proc/self/stat"));
  if (stat.ok()) {
    out.push_back(Family("process_cpu_seconds_total",
                         "Total user and system CPU time spent in seconds.", MetricType::Counter,
                         static_cast<double>(stat->utime_ticks + stat->stime_ticks) / ticks));
    absl::StatusOr<int64_t> boot = ParseBootTime(ReadFile("/proc/stat"));
    if (boot.ok()) {
      out.push_back(
          Family("process_start_time_seconds",
                 "Start time of the process since unix epoch in seconds.", MetricType::Gauge,
                 static_cast<double>(*boot) + static_cast<double>(stat->start_ticks) / ticks));
    }
  }
  absl::StatusOr<int64_t> pages = ParseStatmResidentPages(ReadFile("/proc/self/statm"));
  if (pages.ok()) {
    out.push_back(Family("process_resident_memory_bytes", "Resident memory size in bytes.",
                         MetricType::Gauge,
                         static_cast<double>(*pages) * static_cast<double>(sysconf(_SC_PAGESIZE))));
  }
  return out;
}

}  // namespace pscluster
