// A network written as JSON and rebuilt from it (models/network_json.h) is the same network: the
// same description, the same parameters by name and shape, the same output on the same weights.
#include "models/network_json.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/exec/executor.h"
#include "core/exec/gradcheck.h"
#include "core/plan/planner.h"
#include "core/tile_source.h"
#include "models/zoo.h"

namespace tessel::models {
namespace {

void expect_same_network(core::Graph& a, const std::string& what, int64_t size) {
  const std::string text = network_json(a);
  core::Graph b = network_from_json(text, what);
  EXPECT_EQ(network_json(b), text) << what;
  const auto pa = a.module().named_parameters(), pb = b.module().named_parameters();
  ASSERT_EQ(pa.size(), pb.size()) << what;
  for (size_t i = 0; i < pa.size(); ++i) {
    EXPECT_EQ(pa[i].key(), pb[i].key()) << what;
    EXPECT_EQ(pa[i].value().sizes(), pb[i].value().sizes()) << what << " " << pa[i].key();
  }
  core::randomise(a, 7);
  core::randomise(b, 7);
  at::manual_seed(3);
  const at::Tensor image = at::randn({1, 3, size, size});
  const core::Plan plan = core::make_plan(a, {3, size, size}, 0);
  core::TensorTileSource sa(image), sb(image);
  EXPECT_TRUE(at::equal(core::infer(a, plan, sa), core::infer(b, plan, sb))) << what;
}

TEST(NetworkJson, EveryZooModelWithEitherHeadComesBackTheSame) {
  for (const std::string& name : model_names()) {
    for (const Head head : {Head::kPool, Head::kClassMap}) {
      ModelOptions options;
      options.head = head;
      options.dropout = 0.25;
      core::Graph g = build_model(name, options);
      expect_same_network(g, name, name == "tiny" ? 24 : 64);
    }
  }
}

TEST(NetworkJson, RandomNetworksWithEveryOpComeBackTheSame) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    core::Graph g = random_network(seed, 24);
    expect_same_network(g, "random seed " + std::to_string(seed), 29);
    core::Graph with_barriers = random_network(seed, 24, 3, /*barriers=*/true);
    expect_same_network(with_barriers, "random seed " + std::to_string(seed) + " with barriers",
                        29);
  }
}

// Batch norm in training mode and group norm: the zoo's ResNets with either come back.
TEST(NetworkJson, ZooNormsComeBackTheSame) {
  for (const Norm norm : {Norm::kBatch, Norm::kGroup}) {
    ModelOptions options;
    options.norm = norm;
    core::Graph g = build_model("resnet18", options);
    expect_same_network(g, "resnet18 " + to_string(norm), 64);
  }
}

TEST(NetworkJson, ADamagedDescriptionNamesTheSourceAndTheNode) {
  const std::string good = network_json(build_model("tiny"));
  const auto error_of = [](const std::string& text) {
    try {
      network_from_json(text, "net.h5");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error_of("{").find("net.h5: the network description is not JSON"), std::string::npos);
  EXPECT_NE(error_of(R"({"format": 9, "nodes": [{}]})").find("format 9"), std::string::npos);
  nlohmann::json doc = nlohmann::json::parse(good);
  doc["nodes"][1]["in"] = 5;  // conv1 on a 3-channel input
  EXPECT_NE(error_of(doc.dump()).find("net.h5: network node 1: conv1: expects 5 input channels"),
            std::string::npos)
      << error_of(doc.dump());
  doc = nlohmann::json::parse(good);
  doc["nodes"][2]["inputs"] = {7};
  EXPECT_NE(error_of(doc.dump()).find("network node 2: input 7 is not an earlier node"),
            std::string::npos);
  doc = nlohmann::json::parse(good);
  doc["nodes"][3]["op"] = "attention";
  EXPECT_NE(error_of(doc.dump()).find("'attention' is not an op this Tessel knows"),
            std::string::npos);
  doc = nlohmann::json::parse(good);
  doc["nodes"][1].erase("kernel");
  EXPECT_NE(error_of(doc.dump()).find("network node 1 is malformed"), std::string::npos);
}

}  // namespace
}  // namespace tessel::models
