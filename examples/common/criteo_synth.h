// CriteoSynth: a synthetic click log in the Criteo format
// (kernels/criteo_format.h), deterministic for a seed, whose labels come from
// a planted model, so a trained model's AUC can be held against the best
// possible one (the planted model's own AUC on the same lines).
//
// Line i of a log depends on (seed, i) alone, whatever the file split.
// - Categorical field j (C1..C26) has Criteo Kaggle's cardinality for that
//   field (kCriteoKaggleCardinality, capped at max_cardinality when > 0);
//   its value is a Zipf(zipf) rank r in [1, card] drawn by rejection-inversion
//   (Hoermann and Derflinger; no table, O(1) per draw), written as the 8 hex
//   digits of a 32-bit hash of (j, r). Some fields are missing (empty) at
//   roughly Criteo's rates.
// - Integer field i (I1..I13) is missing at roughly Criteo's rate, else
//   round(exp(N(mu_i, sd_i)) - 1) clamped to the field's Criteo range (I2
//   also takes -1..-3 now and then, as Criteo's does).
// - The label is 1 with probability sigmoid(logit): logit = bias + a dense
//   term (a weight per field times log(1 + max(x, 0)), centred) + for every
//   field a hidden weight of its value (a hash of seed, field and rank in
//   [-1, 1), times the field's strength; a missing value has its own) + dot
//   products of 4-d hidden vectors for a few field pairs. Everything hidden
//   is a hash: nothing is stored, memory stays small for any cardinality.
// Thread-safety: CriteoSynth is immutable after construction.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "shardflow/status.h"

namespace sf::examples {

// C1..C26 of Criteo's Kaggle (Display Advertising Challenge) data, as DLRM counts them.
extern const std::array<int64_t, 26> kCriteoKaggleCardinality;

struct CriteoSynthOptions {
  int64_t lines = 1000;         // lines in all
  int files = 1;                // split evenly, part-00000.tsv[.gz], ...
  bool gzip = false;            // write gzip files (.tsv.gz)
  int64_t max_cardinality = 0;  // caps every field's cardinality (0: Kaggle's as they are)
  double zipf = 1.1;            // exponent of the ids' Zipf law (> 0)
  uint64_t seed = 1;
  int threads = 0;              // files written at once (0: one per core)
};

// One line's planted click probability and the label drawn from it.
struct CriteoSynthLabel {
  double probability = 0;
  bool label = false;
};

class CriteoSynth {
 public:
  // REQUIRES: options.zipf > 0.
  explicit CriteoSynth(const CriteoSynthOptions& options);
  // Appends line i (without '\n') to *out; returns its planted click
  // probability and label. Never fails.
  CriteoSynthLabel AppendLine(int64_t i, std::string* out) const;
  // The cardinality field j (0..25) draws from.
  int64_t cardinality(int j) const { return card_[j]; }

 private:
  struct Zipf {
    double n, s, h_x1, h_n, s_val;
  };
  int64_t DrawRank(int j, uint64_t* state) const;
  std::array<int64_t, 26> card_;
  std::array<Zipf, 26> zipf_;
  CriteoSynthOptions options_;
};

struct CriteoSynthFile {
  std::string path;
  int64_t lines = 0;
  int64_t bytes = 0;  // as written (compressed for gzip)
};

struct CriteoSynthResult {
  std::vector<CriteoSynthFile> files;
  int64_t lines = 0;
  int64_t positives = 0;
  double planted_auc = 0;  // of the planted probabilities against the labels written
};

// Writes the log into dir (created with its parents if needed; existing part files are
// overwritten). InvalidArgument for bad options; Unavailable naming the file
// that could not be written.
Result<CriteoSynthResult> WriteCriteoSynth(const std::string& dir, const CriteoSynthOptions& options);

}  // namespace sf::examples
