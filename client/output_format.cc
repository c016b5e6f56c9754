#include "client/output_format.h"

#include <yaml-cpp/yaml.h>

#include <cctype>
#include <cstdio>

namespace pscluster {
namespace {

// Whether YAML would read `s`, unquoted, as a string: it starts with a letter
// or '/' and is not one of YAML's boolean or null words. Anything else
// (numbers, "", "~", ".5", "-1") is quoted; over-quoting is harmless.
bool SafeAsPlain(const std::string& s) {
  if (s.empty()) return false;
  const unsigned char c = static_cast<unsigned char>(s[0]);
  if (!std::isalpha(c) && c != '/') return false;
  std::string lower;
  for (char ch : s) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  for (const char* word : {"true", "false", "yes", "no", "on", "off", "null", "y", "n"}) {
    if (lower == word) return false;
  }
  return true;
}

void Emit(const nlohmann::json& v, YAML::Emitter* out) {
  switch (v.type()) {
    case nlohmann::json::value_t::object:
      if (v.empty()) *out << YAML::Flow;  // "{}"
      *out << YAML::BeginMap;
      for (const auto& [key, value] : v.items()) {
        *out << YAML::Key << key << YAML::Value;
        Emit(value, out);
      }
      *out << YAML::EndMap;
      return;
    case nlohmann::json::value_t::array:
      if (v.empty()) *out << YAML::Flow;  // "[]"
      *out << YAML::BeginSeq;
      for (const nlohmann::json& item : v) Emit(item, out);
      *out << YAML::EndSeq;
      return;
    case nlohmann::json::value_t::string: {
      const std::string& s = v.get_ref<const std::string&>();
      if (!SafeAsPlain(s)) *out << YAML::DoubleQuoted;
      *out << s;
      return;
    }
    case nlohmann::json::value_t::boolean:
      *out << YAML::TrueFalseBool << v.get<bool>();
      return;
    case nlohmann::json::value_t::null:
      *out << YAML::Null;
      return;
    default:
      // Numbers: JSON's shortest round-trip text is valid YAML ("0.1", not
      // yaml-cpp's "0.10000000000000001").
      *out << v.dump();
      return;
  }
}

}  // namespace

const std::map<std::string, OutputFormat>& OutputFormatNames() {
  static const auto* names = new std::map<std::string, OutputFormat>{
      {"table", OutputFormat::kText},
      {"text", OutputFormat::kText},
      {"json", OutputFormat::kJson},
      {"yaml", OutputFormat::kYaml},
  };
  return *names;
}

std::string JsonToYaml(const nlohmann::json& value) {
  YAML::Emitter out;
  Emit(value, &out);
  std::string text = out.c_str();
  if (text.empty() || text.back() != '\n') text += '\n';
  return text;
}

void PrintStructured(const nlohmann::json& value, OutputFormat format) {
  if (format == OutputFormat::kYaml) {
    std::fputs(JsonToYaml(value).c_str(), stdout);
  } else {
    std::printf("%s\n", value.dump().c_str());
  }
  std::fflush(stdout);
}

}  // namespace pscluster
