#include "client/output_format.h"

#include <yaml-cpp/yaml.h>

#include "gtest/gtest.h"

namespace pscluster {
namespace {

TEST(OutputFormatTest, NamesAcceptTextAsAliasOfTable) {
  const auto& names = OutputFormatNames();
  EXPECT_EQ(names.at("table"), OutputFormat::kText);
  EXPECT_EQ(names.at("text"), OutputFormat::kText);
  EXPECT_EQ(names.at("json"), OutputFormat::kJson);
  EXPECT_EQ(names.at("yaml"), OutputFormat::kYaml);
}

// What a consumer does: load the YAML and find the same values and types.
TEST(OutputFormatTest, YamlCarriesTheSameDataAsJson) {
  const nlohmann::json j = {
      {"job_id", "mnist-1"},  {"state", "SUCCEEDED"}, {"steps", 940},
      {"loss", 0.1},          {"done", true},         {"looks_numeric", "123"},
      {"looks_bool", "true"}, {"empty", ""},          {"epochs", {{{"epoch", 1}}, {{"epoch", 2}}}},
      {"message", "a: b # c"}};
  const std::string text = JsonToYaml(j);
  EXPECT_NE(text.find("loss: 0.1\n"), std::string::npos) << text;
  const YAML::Node y = YAML::Load(text);
  EXPECT_EQ(y["job_id"].as<std::string>(), "mnist-1");
  EXPECT_EQ(y["steps"].as<int64_t>(), 940);
  EXPECT_DOUBLE_EQ(y["loss"].as<double>(), 0.1);
  EXPECT_TRUE(y["done"].as<bool>());
  EXPECT_EQ(y["looks_numeric"].Tag(), "!");  // quoted: a string, not an int
  EXPECT_EQ(y["looks_numeric"].as<std::string>(), "123");
  EXPECT_EQ(y["looks_bool"].Tag(), "!");
  EXPECT_EQ(y["empty"].as<std::string>(), "");
  ASSERT_TRUE(y["epochs"].IsSequence());
  EXPECT_EQ(y["epochs"][1]["epoch"].as<int>(), 2);
  EXPECT_EQ(y["message"].as<std::string>(), "a: b # c");
}

}  // namespace
}  // namespace pscluster
