// Slide-level classification metrics: accuracy, balanced accuracy and ROC AUC (binary, and the
// one-vs-rest macro average for more classes). Pure functions on probabilities and labels.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessel::pipelines {

struct ClassificationMetrics {
  int64_t count = 0;
  double loss = 0;                    // mean cross-entropy, when the caller sets it
  double accuracy = 0;                // fraction of argmax predictions that are right
  double balanced_accuracy = 0;       // mean recall over the classes present
  double auc = 0;                     // ROC AUC: binary, or macro one-vs-rest; NaN if undefined
  std::vector<double> recall;         // per class; NaN for a class with no slides
  std::vector<double> auc_per_class;  // one-vs-rest ROC AUC per class; NaN where undefined
};

// `probabilities[i]` are slide i's class probabilities; `labels[i]` its class index.
ClassificationMetrics classification_metrics(const std::vector<std::vector<double>>& probabilities,
                                             const std::vector<int64_t>& labels);

// ROC AUC of `scores` for the positives (Mann–Whitney U with average ranks for ties): the
// probability that a random positive scores above a random negative. NaN when either is absent.
double roc_auc(const std::vector<double>& scores, const std::vector<bool>& positive);

// With more than two classes, each class's recall and one-vs-rest AUC, `separator` between them:
// "normal: recall 0.500 · AUC 0.750; tumour: …"; empty for two classes.
std::string per_class_string(const ClassificationMetrics& m,
                             const std::vector<std::string>& classes,
                             const std::string& separator = "; ");
// to_string(m), and with more than two classes each class's line below it (tessel eval).
std::string to_string(const ClassificationMetrics& m, const std::vector<std::string>& classes);
std::string to_string(const ClassificationMetrics& m);

}  // namespace tessel::pipelines
