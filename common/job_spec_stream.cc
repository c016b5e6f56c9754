// data.*.stream: streaming input (common/job_spec.h, StreamSpec).
#include "common/job_spec_parse.h"

namespace pscluster {
namespace job_spec_internal {

void ParseStream(const YAML::Node& n, const std::string& where, DataSourceSpec* d) {
  StreamSpec& s = d->stream;
  s.enabled = true;
  // A stream is read unit by unit, never as one data set: a row limit or a
  // holdout split over row numbers across files has no meaning there.
  if (n["limit"]) Fail(n["limit"], absl::StrCat(where, ".limit cannot be combined with stream"));
  if (n["split"]) {
    Fail(n["split"], absl::StrCat(where, ".split cannot be combined with stream (give the "
                                         "holdout files as data.eval)"));
  }
  const YAML::Node stream = n["stream"];
  if (!stream || stream.IsNull()) return;  // tfrecord without a block: the defaults
  const std::string at = where + ".stream";
  if (stream.IsScalar()) {
    // `stream: true` turns the defaults on (and `false` is refused rather
    // than quietly loading a larger-than-memory set).
    if (!Bool(stream, at)) Fail(stream, at + ": false is the same as no stream block; omit it");
    return;
  }
  ExpectMap(stream, at);
  CheckKeys(stream, at, {"shard", "prefetch_bytes", "shuffle_buffer", "corrupt_records"});
  if (YAML::Node v = stream["shard"]) {
    const std::string shard = Str(v, at + ".shard");
    if (shard == "file") s.shard = StreamSpec::Shard::kFile;
    else if (shard == "data") s.shard = StreamSpec::Shard::kData;
    else Fail(v, absl::StrCat("unknown shard '", shard, "' (expected file or data)"));
  }
  if (stream["prefetch_bytes"]) {
    s.prefetch_bytes = Int(stream["prefetch_bytes"], at + ".prefetch_bytes", 1, int64_t{1} << 34);
  }
  if (stream["shuffle_buffer"]) {
    s.shuffle_buffer =
        Int(stream["shuffle_buffer"], at + ".shuffle_buffer", 0, JobLimits::kMaxStreamShuffle);
  }
  if (YAML::Node v = stream["corrupt_records"]) {
    const std::string policy = Str(v, at + ".corrupt_records");
    if (policy == "skip") s.skip_corrupt = true;
    else if (policy == "fail") s.skip_corrupt = false;
    else Fail(v, absl::StrCat("unknown corrupt_records '", policy, "' (expected skip or fail)"));
  }
}

void CheckStreaming(const YAML::Node& at, const JobSpec& spec) {
  // Streaming closures step through their unit whole; the synchronous
  // strategies slice each global batch over replicas and the in-process
  // ones load their data themselves.
  if (spec.strategy != Strategy::kParameterServer) {
    Fail(at, absl::StrCat("streaming input (a stream block or tfrecord data) runs with strategy "
                          "parameter_server only, not ",
                          StrategyName(spec.strategy)));
  }
  if (spec.devices > 1) Fail(at, "streaming input runs with devices: 1 only");
}

}  // namespace job_spec_internal
}  // namespace pscluster
