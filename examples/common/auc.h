// Area under the ROC curve, the metric of the CTR examples (embedding_ctr, dlrm).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

namespace sf::examples {

// AUC of scores against 0/1 labels (label > 0.5 is a positive) by the rank
// sum (Mann-Whitney U): sort by score, give tied scores their average rank,
// AUC = (sum of positive ranks - P (P + 1) / 2) / (P N). A tie between a
// positive and a negative so counts one half. NaN when scores and labels
// differ in size or either class is empty (AUC is undefined then).
inline double Auc(const std::vector<float>& scores, const std::vector<float>& labels) {
  if (scores.size() != labels.size()) return std::nan("");
  const size_t n = scores.size();
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scores[a] < scores[b]; });
  double positive_rank_sum = 0;
  int64_t positives = 0;
  for (size_t i = 0; i < n;) {
    size_t j = i;
    while (j < n && scores[order[j]] == scores[order[i]]) ++j;
    const double rank = (static_cast<double>(i + 1) + static_cast<double>(j)) / 2.0;  // ranks i+1..j
    for (size_t k = i; k < j; ++k)
      if (labels[order[k]] > 0.5f) {
        positive_rank_sum += rank;
        ++positives;
      }
    i = j;
  }
  const int64_t negatives = static_cast<int64_t>(n) - positives;
  if (positives == 0 || negatives == 0) return std::nan("");
  const double p = static_cast<double>(positives);
  return (positive_rank_sum - p * (p + 1) / 2) / (p * static_cast<double>(negatives));
}

}  // namespace sf::examples
