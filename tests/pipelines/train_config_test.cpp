// The training config: defaults, YAML and JSON files, key=value overrides, and errors that name
// the file and the key.
#include "pipelines/train_config.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace tessel::pipelines {
namespace {

std::string error_of(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  try {
    parse_train_config(yaml, "run.yaml", overrides);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(TrainConfig, ReadsYamlAndJsonAndAppliesOverridesLast) {
  const TrainConfig yaml = parse_train_config(
      "manifest: data.csv\nmodel: tiny\nlr: 3e-4\nmagnification: 10x\nclasses: [normal, tumour]\n",
      "run.yaml", {"lr=0.01", "epochs=3"});
  EXPECT_EQ(yaml.manifest, "data.csv");
  EXPECT_EQ(yaml.model, "tiny");
  EXPECT_DOUBLE_EQ(yaml.lr, 0.01);
  EXPECT_EQ(yaml.epochs, 3);
  EXPECT_DOUBLE_EQ(*yaml.magnification, 10);
  EXPECT_EQ(yaml.classes, (std::vector<std::string>{"normal", "tumour"}));
  const TrainConfig json =
      parse_train_config(R"({"manifest": "d.csv", "batch": 4, "flips": true})", "run.json");
  EXPECT_EQ(json.batch, 4);
  EXPECT_TRUE(json.flips);
  EXPECT_EQ(json.optimizer, "adam");  // a default
}

TEST(TrainConfig, SavedYamlReadsBackToTheSameConfig) {
  const TrainConfig a = parse_train_config(
      "manifest: data.csv\nmpp: 2.5\nbase_mpp: 0.25\nschedule: cosine\nwarmup_epochs: 1.5\n"
      "classes: [a, 'b, c']\nbudget: 512MiB\ndevice: cpu\nprecision: bf16\n",
      "run.yaml");
  const TrainConfig b = parse_train_config(a.to_yaml(), "saved");
  EXPECT_EQ(a.to_yaml(), b.to_yaml());
  EXPECT_EQ(b.classes, (std::vector<std::string>{"a", "b, c"}));
  EXPECT_DOUBLE_EQ(*b.mpp, 2.5);
  EXPECT_FALSE(b.level.has_value());
  EXPECT_EQ(b.device, "cpu");
  EXPECT_EQ(b.precision, "bf16");
}

TEST(TrainConfig, ErrorsNameTheFileAndTheKey) {
  const auto expect_error = [](const std::string& message, const std::string& part) {
    EXPECT_NE(message.find(part), std::string::npos)
        << "'" << message << "' lacks '" << part << "'";
  };
  expect_error(error_of("manifest: d.csv\nlearning_rate: 0.1\n"),
               "run.yaml: unknown key 'learning_rate'");
  expect_error(error_of("manifest: d.csv\nepochs: many\n"),
               "run.yaml: epochs: expected a whole number");
  expect_error(error_of("manifest: d.csv\nepochs: 0\n"), "epochs must be at least 1");
  expect_error(error_of("manifest: d.csv\nmodel: alexnet\n"), "model 'alexnet'");
  expect_error(error_of("manifest: d.csv\nmpp: 1\nlevel: 2\n"), "exclusive");
  expect_error(error_of("manifest: d.csv\nbudget: lots\n"), "run.yaml");
  expect_error(error_of("manifest: d.csv\nbudget: 0B\n"), "budget must be positive");
  expect_error(error_of("manifest: d.csv\nlr: .inf\n"), "lr must be a positive number");
  expect_error(error_of("manifest: d.csv\nmpp: .nan\n"), "mpp must be a positive number");
  expect_error(error_of("manifest: d.csv\nstrategy: diagonal\n"), "diagonal");
  expect_error(error_of("model: tiny\n"), "manifest is required");
  expect_error(error_of("- a\n- b\n"), "mapping");
  expect_error(error_of("manifest: [unclosed\n"), "not valid YAML");
  // yaml-cpp's own words for this are "bad file".
  expect_error(error_of("lr: " + std::string(5000, '[') + std::string(5000, ']') + "\n"),
               "run.yaml: not valid YAML or JSON: lists or mappings nested more than");
  expect_error(error_of("manifest: d.csv\n", {"lr=" + std::string(5000, '{')}), "override 'lr=");
  expect_error(error_of("manifest: d.csv\n", {"lr"}), "not key=value");
  expect_error(error_of("manifest: d.csv\n", {"optimiser=sgd"}), "unknown key 'optimiser'");
  expect_error(error_of("manifest: d.csv\nmagnification: tenx\n"), "magnification");
  expect_error(error_of("manifest: d.csv\ndevice: gpu\n"), "device must be cpu, cuda");
  expect_error(error_of("manifest: d.csv\ndevice: cuda:x\n"), "device must be cpu, cuda");
  expect_error(error_of("manifest: d.csv\nprecision: half\n"), "unknown precision 'half'");
  EXPECT_EQ(error_of("manifest: d.csv\ndevice: cuda:1\nprecision: bf16\n"), "");
  expect_error(error_of("manifest: d.csv\nread_ahead: true\n"),
               "read_ahead must be auto or a number of slides from 0 to 16");
  expect_error(error_of("manifest: d.csv\nread_ahead: 17\n"), "read_ahead must be auto");
  expect_error(error_of("manifest: d.csv\nread_ahead: -1\n"), "read_ahead must be auto");
  EXPECT_EQ(error_of("manifest: d.csv\nread_ahead: 0\n"), "");
  EXPECT_EQ(error_of("manifest: d.csv\nread_ahead: 4\n"), "");
  expect_error(error_of("manifest: d.csv\nparallel: model\n"),
               "parallel must be data, slide or hybrid");
  expect_error(error_of("manifest: d.csv\nparallel: hybrid\n"),
               "slide_ranks must be 2 or more with parallel: hybrid");
  expect_error(error_of("manifest: d.csv\nparallel: slide\nslide_ranks: 2\n"),
               "slide_ranks is the group size of parallel: hybrid");
  expect_error(error_of("manifest: d.csv\nparallel: slide\nstrategy: 2ps\n"),
               "strategy must be auto, grid or rows with parallel: slide");
  EXPECT_EQ(error_of("manifest: d.csv\nparallel: hybrid\nslide_ranks: 4\n"), "");
  expect_error(error_of("manifest: d.csv\nbudget: 99999999TiB\n"), "too large a size");
  expect_error(error_of("manifest: d.csv\nbudget: nanGiB\n"), "is not a size");
  expect_error(error_of("manifest: d.csv\nlr: 0.1\nepochs: 2\nlr: 0.001\n"),
               "run.yaml: key 'lr' appears twice (line 4)");
  expect_error(error_of(R"({"manifest": "d.csv", "lr": 1, "lr": 2})"), "key 'lr' appears twice");
  expect_error(error_of("manifest: d.csv\n? [a, b]\n: 1\n"),
               "run.yaml: the key on line 2 is a list or a mapping");
  EXPECT_EQ(error_of("manifest: d.csv\n"), "");
}

TEST(TrainConfig, AFolderGivenAsTheConfigIsNamedAsAFolder) {
  try {
    load_train_config(std::filesystem::temp_directory_path());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("it is a folder"), std::string::npos) << e.what();
  }
}

TEST(TrainConfig, MissingFileIsAClearError) {
  try {
    load_train_config("/no/such/run.yaml");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/no/such/run.yaml"), std::string::npos);
  }
}

}  // namespace
}  // namespace tessel::pipelines
