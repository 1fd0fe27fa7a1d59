// Classification metrics against values worked out by hand (and scikit-learn's documented
// example for ROC AUC).
#include "pipelines/metrics.h"

#include <gtest/gtest.h>

#include <cmath>

namespace tessel::pipelines {
namespace {

TEST(RocAuc, MatchesScikitLearnsExample) {
  // sklearn.metrics.roc_auc_score([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8]) == 0.75
  EXPECT_DOUBLE_EQ(roc_auc({0.1, 0.4, 0.35, 0.8}, {false, false, true, true}), 0.75);
}

TEST(RocAuc, CountsTiesAsHalfAndIsUndefinedWithOneClass) {
  EXPECT_DOUBLE_EQ(roc_auc({0.5, 0.5}, {true, false}), 0.5);
  EXPECT_DOUBLE_EQ(roc_auc({0.2, 0.5, 0.5, 0.9}, {false, true, false, true}), 0.875);
  EXPECT_TRUE(std::isnan(roc_auc({0.2, 0.3}, {true, true})));
  EXPECT_DOUBLE_EQ(roc_auc({0.9, 0.1}, {false, true}), 0.0);
}

TEST(ClassificationMetrics, BalancedAccuracyAveragesRecallOverClasses) {
  // 3 of class 0 (2 right), 1 of class 1 (right): accuracy 3/4, balanced (2/3 + 1) / 2.
  const ClassificationMetrics m =
      classification_metrics({{0.9, 0.1}, {0.8, 0.2}, {0.3, 0.7}, {0.4, 0.6}}, {0, 0, 0, 1});
  EXPECT_EQ(m.count, 4);
  EXPECT_DOUBLE_EQ(m.accuracy, 0.75);
  EXPECT_DOUBLE_EQ(m.balanced_accuracy, (2.0 / 3.0 + 1.0) / 2.0);
  // Class-1 scores 0.1, 0.2, 0.7 (negatives) vs 0.6 (positive): 2 of 3 pairs ordered.
  EXPECT_DOUBLE_EQ(m.auc, 2.0 / 3.0);
  EXPECT_DOUBLE_EQ(m.recall[0], 2.0 / 3.0);
}

TEST(ClassificationMetrics, MultiClassAucIsTheMacroOneVsRestMean) {
  const std::vector<std::vector<double>> p = {
      {0.7, 0.2, 0.1}, {0.2, 0.7, 0.1}, {0.1, 0.2, 0.7}, {0.5, 0.4, 0.1}};
  const ClassificationMetrics m = classification_metrics(p, {0, 1, 2, 1});
  // One-vs-rest: class 0 scores {0.7 | 0.2, 0.1, 0.5} → 1; class 1 {0.7, 0.4 | 0.2, 0.2} → 1;
  // class 2 {0.7 | 0.1, 0.1, 0.1} → 1.
  EXPECT_DOUBLE_EQ(m.auc, 1.0);
  EXPECT_DOUBLE_EQ(m.accuracy, 0.75);
  EXPECT_TRUE(std::isnan(classification_metrics({}, {}).accuracy));
}

TEST(ClassificationMetrics, EachClassHasItsRecallAndOneVsRestAuc) {
  // One-vs-rest: class 0 scores {0.6, 0.2 | 0.1, 0.3}: 3 of 4 pairs ordered, 0.75; class 2
  // {0.2 | 0.1, 0.7, 0.4}: 1 of 3.
  const std::vector<std::vector<double>> p = {
      {0.6, 0.3, 0.1}, {0.2, 0.1, 0.7}, {0.1, 0.5, 0.4}, {0.3, 0.5, 0.2}};
  const ClassificationMetrics m = classification_metrics(p, {0, 0, 1, 2});
  ASSERT_EQ(m.auc_per_class.size(), 3U);
  EXPECT_DOUBLE_EQ(m.auc_per_class[0], 0.75);
  EXPECT_DOUBLE_EQ(m.auc_per_class[2], 1.0 / 3.0);
  EXPECT_DOUBLE_EQ(m.auc, (m.auc_per_class[0] + m.auc_per_class[1] + m.auc_per_class[2]) / 3);
  EXPECT_DOUBLE_EQ(m.recall[0], 0.5);
  EXPECT_DOUBLE_EQ(m.recall[2], 0.0);
  const std::string text = to_string(m, {"normal", "tumour", "other"});
  EXPECT_NE(text.find("other: recall 0.000 · AUC 0.333"), std::string::npos) << text;
  EXPECT_NE(text.find("normal: recall 0.500 · AUC 0.750"), std::string::npos) << text;
  // Two classes: the line as it was.
  EXPECT_EQ(to_string(classification_metrics({{0.9, 0.1}, {0.2, 0.8}}, {0, 1}), {"a", "b"}),
            to_string(classification_metrics({{0.9, 0.1}, {0.2, 0.8}}, {0, 1})));
}

}  // namespace
}  // namespace tessel::pipelines
