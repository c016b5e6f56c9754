// psctl's -o/--output formats, and the rendering of its structured results
// (nlohmann::json values from result_json.h) as JSON or YAML. One set of data,
// two syntaxes: YAML is the same JSON value written by yaml-cpp's Emitter.
//
// Pure functions (PrintStructured writes to stdout); thread-safe.
#ifndef PSCLUSTER_CLIENT_OUTPUT_FORMAT_H_
#define PSCLUSTER_CLIENT_OUTPUT_FORMAT_H_

#include <map>
#include <nlohmann/json.hpp>
#include <string>

namespace pscluster {

enum class OutputFormat {
  kText,  // "table" (alias "text"): progress and tables/summaries for people
  kJson,  // one JSON object on stdout; progress goes to stderr
  kYaml,  // the same object as a YAML document
};

// The accepted spellings of --output: table, text (alias of table), json, yaml.
const std::map<std::string, OutputFormat>& OutputFormatNames();

// `value` as a YAML document (block style, ending in a newline). Numbers stay
// numbers, and strings that YAML would read as something else ("true",
// "1.5", "", "null") are quoted.
std::string JsonToYaml(const nlohmann::json& value);

// Prints `value` on stdout in `format` and flushes.
// REQUIRES: format is kJson or kYaml.
void PrintStructured(const nlohmann::json& value, OutputFormat format);

}  // namespace pscluster

#endif  // PSCLUSTER_CLIENT_OUTPUT_FORMAT_H_
