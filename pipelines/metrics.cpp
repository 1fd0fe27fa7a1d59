#include "pipelines/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>

#include "core/error.h"

namespace tessel::pipelines {

double roc_auc(const std::vector<double>& scores, const std::vector<bool>& positive) {
  const size_t n = scores.size();
  if (positive.size() != n) throw Error("roc_auc: scores and labels differ in length");
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scores[a] < scores[b]; });
  // Average ranks (1-based) over ties.
  std::vector<double> rank(n);
  for (size_t i = 0; i < n;) {
    size_t j = i;
    while (j + 1 < n && scores[order[j + 1]] == scores[order[i]]) ++j;
    const double average = (static_cast<double>(i + j) / 2.0) + 1.0;
    for (size_t k = i; k <= j; ++k) rank[order[k]] = average;
    i = j + 1;
  }
  double positives = 0, rank_sum = 0;
  for (size_t i = 0; i < n; ++i) {
    if (positive[i]) {
      positives += 1;
      rank_sum += rank[i];
    }
  }
  const double negatives = static_cast<double>(n) - positives;
  if (positives == 0 || negatives == 0) return std::numeric_limits<double>::quiet_NaN();
  return (rank_sum - positives * (positives + 1) / 2) / (positives * negatives);
}

ClassificationMetrics classification_metrics(const std::vector<std::vector<double>>& probabilities,
                                             const std::vector<int64_t>& labels) {
  if (probabilities.size() != labels.size()) {
    throw Error("metrics: predictions and labels differ in length");
  }
  ClassificationMetrics m;
  m.count = static_cast<int64_t>(labels.size());
  if (labels.empty()) {
    m.accuracy = m.balanced_accuracy = m.auc = std::numeric_limits<double>::quiet_NaN();
    return m;
  }
  const size_t classes = probabilities.front().size();
  std::vector<double> right(classes, 0), total(classes, 0);
  double correct = 0;
  for (size_t i = 0; i < labels.size(); ++i) {
    const std::vector<double>& p = probabilities[i];
    if (p.size() != classes) throw Error("metrics: predictions have different class counts");
    const auto label = static_cast<size_t>(labels[i]);
    if (label >= classes) throw Error("metrics: a label is outside the classes");
    const auto predicted = static_cast<size_t>(std::max_element(p.begin(), p.end()) - p.begin());
    total[label] += 1;
    if (predicted == label) {
      right[label] += 1;
      correct += 1;
    }
  }
  m.accuracy = correct / static_cast<double>(labels.size());
  double recall_sum = 0, present = 0;
  for (size_t c = 0; c < classes; ++c) {
    m.recall.push_back(total[c] > 0 ? right[c] / total[c]
                                    : std::numeric_limits<double>::quiet_NaN());
    if (total[c] > 0) {
      recall_sum += right[c] / total[c];
      present += 1;
    }
  }
  m.balanced_accuracy = recall_sum / present;
  // Binary: the AUC of class 1's probability. More classes: the mean of the one-vs-rest AUCs
  // that are defined (a class absent from the labels has none).
  const auto one_vs_rest = [&](size_t c) {
    std::vector<double> scores;
    std::vector<bool> positive;
    for (size_t i = 0; i < labels.size(); ++i) {
      scores.push_back(probabilities[i][c]);
      positive.push_back(static_cast<size_t>(labels[i]) == c);
    }
    return roc_auc(scores, positive);
  };
  for (size_t c = 0; c < classes; ++c) m.auc_per_class.push_back(one_vs_rest(c));
  if (classes == 2) {
    m.auc = m.auc_per_class[1];
  } else {
    double sum = 0, defined = 0;
    for (size_t c = 0; c < classes; ++c) {
      const double auc = m.auc_per_class[c];
      if (!std::isnan(auc)) {
        sum += auc;
        defined += 1;
      }
    }
    m.auc = defined > 0 ? sum / defined : std::numeric_limits<double>::quiet_NaN();
  }
  return m;
}

std::string to_string(const ClassificationMetrics& m) {
  char text[160];
  std::snprintf(text, sizeof text,
                "loss %.4f · accuracy %.3f · balanced %.3f · AUC %.3f (%lld slides)", m.loss,
                m.accuracy, m.balanced_accuracy, m.auc, static_cast<long long>(m.count));
  return text;
}

std::string per_class_string(const ClassificationMetrics& m,
                             const std::vector<std::string>& classes,
                             const std::string& separator) {
  std::string out;
  if (classes.size() <= 2 || m.recall.size() != classes.size()) return out;
  for (size_t c = 0; c < classes.size(); ++c) {
    char text[120];
    std::snprintf(text, sizeof text, "%s: recall %.3f · AUC %.3f", classes[c].c_str(), m.recall[c],
                  c < m.auc_per_class.size() ? m.auc_per_class[c] : NAN);
    out += (c == 0 ? "" : separator) + text;
  }
  return out;
}

std::string to_string(const ClassificationMetrics& m, const std::vector<std::string>& classes) {
  const std::string by_class = per_class_string(m, classes, "\n  ");
  return by_class.empty() ? to_string(m) : to_string(m) + "\n  " + by_class;
}

}  // namespace tessel::pipelines
