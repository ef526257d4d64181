// A synthetic click log in the Criteo format (examples/common/criteo_synth.h):
// Criteo Kaggle's 26 categorical cardinalities (capped by --max-cardinality),
// Zipf ids, the integer fields' ranges and missing rates, labels from a
// planted model.
//
//   build/bin/criteo_synth --lines 1000000 --out /tmp/criteo [--files 4] [--gzip] [--json]
//
// With --json: one line per file written ({"file", "lines", "bytes"}), then
// the summary {"lines", "files", "gzip", "positive_fraction", "planted_auc",
// "seconds", "lines_per_sec", "out"}: planted_auc is the planted model's AUC
// on the labels it drew, the ceiling a trained model can reach.
#include <chrono>
#include <cstdio>

#include "examples/common/criteo_synth.h"
#include "examples/common/flags.h"
#include "examples/common/json.h"

using namespace sf;
using namespace sf::examples;

int main(int argc, char** argv) {
  Flags flags;
  flags.Int("lines", 1000, "lines to write in all")
      .String("out", "", "the directory to write into (created if needed)")
      .Int("files", 1, "files to split the lines over (part-00000.tsv, ...)")
      .Bool("gzip", "write gzip files (.tsv.gz)")
      .Int("max-cardinality", 0, "cap every categorical field's cardinality (0: Criteo Kaggle's)")
      .Double("zipf", 1.1, "exponent of the ids' Zipf law")
      .Int("seed", 1, "the log's seed (a line depends on the seed and its number only)")
      .Int("threads", 0, "files written at once (0: one per core)")
      .Bool("json", "print JSON lines");
  ParseOrExit(flags, argc, argv, "criteo_synth");
  CriteoSynthOptions o;
  o.lines = flags.GetInt("lines");
  o.files = static_cast<int>(flags.GetInt("files"));
  o.gzip = flags.GetBool("gzip");
  o.max_cardinality = flags.GetInt("max-cardinality");
  o.zipf = flags.GetDouble("zipf");
  o.seed = static_cast<uint64_t>(flags.GetInt("seed"));
  o.threads = static_cast<int>(flags.GetInt("threads"));
  const std::string out = flags.GetString("out");
  if (out.empty()) {
    std::fprintf(stderr, "criteo_synth: --out DIR is required\n");
    return 2;
  }
  if (flags.GetInt("files") < 1 || flags.GetInt("files") > 100000 || o.lines < 0) {
    std::fprintf(stderr, "criteo_synth: --files must be in [1, 100000] and --lines >= 0\n");
    return 2;
  }
  const auto t0 = std::chrono::steady_clock::now();
  auto r = WriteCriteoSynth(out, o);
  if (!r.ok()) {
    std::fprintf(stderr, "criteo_synth: %s\n", r.status().ToString().c_str());
    return 1;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double positive_fraction = r->lines ? static_cast<double>(r->positives) / r->lines : 0.0;
  if (flags.GetBool("json")) {
    for (const auto& f : r->files) JsonLine().Add("file", f.path).Add("lines", f.lines).Add("bytes", f.bytes).Print();
    JsonLine()
        .Add("lines", r->lines).Add("files", o.files).Add("gzip", o.gzip)
        .Add("positive_fraction", positive_fraction).Add("planted_auc", r->planted_auc)
        .Add("seconds", seconds).Add("lines_per_sec", r->lines / std::max(seconds, 1e-9)).Add("out", out)
        .Print();
  } else {
    std::printf("wrote %lld lines in %d file(s) under %s in %.2f s; positives %.4f, planted model AUC %.4f\n",
                static_cast<long long>(r->lines), o.files, out.c_str(), seconds, positive_fraction, r->planted_auc);
  }
  return 0;
}
