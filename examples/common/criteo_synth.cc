#include "examples/common/criteo_synth.h"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <thread>

namespace sf::examples {

const std::array<int64_t, 26> kCriteoKaggleCardinality = {
    1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194,
    27, 14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572};

namespace {

uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// The next uniform double in [0, 1) of a splitmix64 stream.
double Uniform(uint64_t* state) {
  *state += 0x9e3779b97f4a7c15ULL;
  return static_cast<double>(Mix(*state) >> 11) * 0x1.0p-53;
}

// A hash of (seed, a, b) as a double in [-1, 1).
double Signed(uint64_t seed, uint64_t a, uint64_t b) {
  return static_cast<double>(Mix(Mix(seed ^ Mix(a * 0x100000001b3ULL)) ^ b) >> 11) * 0x1.0p-52 - 1.0;
}

struct DenseField {
  double missing, mu, sd;  // mu, sd: of log(1 + x) where present
  int64_t max;
};
// Roughly Criteo Kaggle's I1..I13: missing rates, spread and ranges.
constexpr DenseField kDense[13] = {
    {0.45, 1.0, 1.1, 5775},    {0.0, 2.5, 2.0, 257675}, {0.21, 2.3, 1.3, 65535}, {0.22, 1.7, 1.0, 969},
    {0.03, 7.5, 2.3, 23159456}, {0.22, 3.6, 1.7, 431037}, {0.04, 1.6, 1.5, 56311}, {0.0005, 2.4, 1.1, 6047},
    {0.04, 3.8, 1.5, 29019},   {0.45, 0.5, 0.5, 11},     {0.04, 1.1, 0.9, 231},   {0.77, 0.4, 0.9, 4008},
    {0.22, 1.8, 1.1, 7393}};
// Roughly Criteo Kaggle's missing rates of C1..C26.
constexpr double kCategoricalMissing[26] = {0, 0, .034, .034, 0, .12, 0, 0, 0, .034, 0, .034, 0,
                                            0, 0, .034, 0, 0, .44, .44, .034, .76, 0, .034, .44, .44};
// Field pairs whose hidden 4-d vectors' dot product enters the logit.
constexpr int kPairs[4][2] = {{0, 1}, {4, 13}, {5, 16}, {8, 19}};
constexpr double kBias = -1.35;

// Rejection-inversion Zipf sampling (Hoermann and Derflinger 1996, as in
// Apache Commons' RejectionInversionZipfSampler).
double Helper1(double x) { return std::abs(x) > 1e-8 ? std::log1p(x) / x : 1 - x * (0.5 - x * (1.0 / 3 - 0.25 * x)); }
double Helper2(double x) { return std::abs(x) > 1e-8 ? std::expm1(x) / x : 1 + x * 0.5 * (1 + x / 3 * (1 + 0.25 * x)); }
double H(double x, double s) { return std::exp(-s * std::log(x)); }
double HIntegral(double x, double s) {
  const double lx = std::log(x);
  return Helper2((1 - s) * lx) * lx;
}
double HIntegralInverse(double x, double s) {
  double t = x * (1 - s);
  if (t < -1) t = -1;
  return std::exp(Helper1(t) * x);
}

// Area under the ROC curve from click probabilities binned finely: pairs in
// one bin count one half (an error far below 1e-4 with 2^18 bins).
struct AucBins {
  static constexpr int kBins = 1 << 18;
  std::vector<int64_t> pos = std::vector<int64_t>(kBins), neg = std::vector<int64_t>(kBins);
  void Add(double p, bool label) {
    const int b = std::min(kBins - 1, static_cast<int>(p * kBins));
    (label ? pos : neg)[b]++;
  }
  void Merge(const AucBins& o) {
    for (int b = 0; b < kBins; ++b) pos[b] += o.pos[b], neg[b] += o.neg[b];
  }
  double Auc() const {
    double below = 0, pairs = 0, wins = 0, positives = 0;
    for (int b = 0; b < kBins; ++b) {
      wins += pos[b] * (below + 0.5 * neg[b]);
      below += neg[b];
      positives += pos[b];
    }
    pairs = positives * below;
    return pairs > 0 ? wins / pairs : std::nan("");
  }
};

}  // namespace

CriteoSynth::CriteoSynth(const CriteoSynthOptions& options) : options_(options) {
  for (int j = 0; j < 26; ++j) {
    card_[j] = kCriteoKaggleCardinality[j];
    if (options.max_cardinality > 0) card_[j] = std::min(card_[j], options.max_cardinality);
    Zipf& z = zipf_[j];
    z.n = static_cast<double>(card_[j]);
    z.s = options.zipf;
    z.h_x1 = HIntegral(1.5, z.s) - 1;
    z.h_n = HIntegral(z.n + 0.5, z.s);
    z.s_val = 2 - HIntegralInverse(HIntegral(2.5, z.s) - H(2, z.s), z.s);
  }
}

int64_t CriteoSynth::DrawRank(int j, uint64_t* state) const {
  const Zipf& z = zipf_[j];
  for (;;) {
    const double u = z.h_n + Uniform(state) * (z.h_x1 - z.h_n);
    const double x = HIntegralInverse(u, z.s);
    double k = std::floor(x + 0.5);
    k = std::clamp(k, 1.0, z.n);
    if (k - x <= z.s_val || u >= HIntegral(k + 0.5, z.s) - H(k, z.s)) return static_cast<int64_t>(k);
  }
}

CriteoSynthLabel CriteoSynth::AppendLine(int64_t i, std::string* out) const {
  const uint64_t seed = options_.seed;
  uint64_t state = Mix(seed ^ Mix(static_cast<uint64_t>(i)));
  char buf[512];
  char* p = buf + 2;  // the label goes first, once known
  double logit = kBias;
  for (int f = 0; f < 13; ++f) {
    *p++ = '\t';
    const DenseField& d = kDense[f];
    const double u = Uniform(&state);
    const double u1 = Uniform(&state), u2 = Uniform(&state);
    double x = 0;  // log(1 + max(v, 0)) as the reader will see it
    if (u >= d.missing) {
      int64_t v;
      if (f == 1 && u1 < 0.05) {
        v = -1 - static_cast<int64_t>(u2 * 3);
      } else {
        const double g = std::sqrt(-2 * std::log1p(-u1)) * std::cos(2 * M_PI * u2);
        v = std::clamp<int64_t>(std::llround(std::expm1(std::max(0.0, d.mu + d.sd * g))), 0, d.max);
      }
      p = std::to_chars(p, buf + sizeof buf, v).ptr;
      x = std::log1p(static_cast<double>(std::max<int64_t>(v, 0)));
    }
    logit += 0.5 * Signed(seed, 1000 + f, 0) * (x - d.mu * (1 - d.missing)) / d.sd;
  }
  static const char kHex[] = "0123456789abcdef";
  int64_t ranks[26];
  for (int j = 0; j < 26; ++j) {
    *p++ = '\t';
    const bool missing = Uniform(&state) < kCategoricalMissing[j];
    const int64_t r = missing ? 0 : DrawRank(j, &state);
    ranks[j] = r;
    if (!missing) {
      const uint32_t h = static_cast<uint32_t>(Mix(seed * 31 + Mix((static_cast<uint64_t>(j) << 40) ^ r)));
      for (int k = 7; k >= 0; --k) *p++ = kHex[(h >> (4 * k)) & 15];
    }
    const double strength = card_[j] <= 1000 ? 0.7 : card_[j] <= 100000 ? 0.5 : 0.15;
    logit += strength * Signed(seed, j, static_cast<uint64_t>(r));
  }
  for (const auto& pr : kPairs) {
    double dot = 0;
    for (int k = 0; k < 4; ++k)
      dot += Signed(seed, 100 + pr[0] * 4 + k, ranks[pr[0]]) * Signed(seed, 200 + pr[1] * 4 + k, ranks[pr[1]]);
    logit += 0.8 * dot;
  }
  const double prob = 1 / (1 + std::exp(-logit));
  const bool label = Uniform(&state) < prob;
  buf[1] = label ? '1' : '0';
  out->append(buf + 1, p);
  return {prob, label};
}

Result<CriteoSynthResult> WriteCriteoSynth(const std::string& dir, const CriteoSynthOptions& o) {
  if (o.lines < 0) return InvalidArgument("lines must be >= 0, got " + std::to_string(o.lines));
  if (o.files < 1) return InvalidArgument("files must be >= 1, got " + std::to_string(o.files));
  if (!(o.zipf > 0)) return InvalidArgument("zipf must be > 0");
  if (o.max_cardinality < 0) return InvalidArgument("max_cardinality must be >= 0");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Unavailable("cannot create the directory '" + dir + "': " + ec.message());
  const CriteoSynth synth(o);
  CriteoSynthResult result;
  result.files.resize(o.files);
  int threads = o.threads > 0 ? o.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  threads = std::min(threads, o.files);
  std::atomic<int> next{0};
  std::mutex mu;
  AucBins all;
  Status error;
  auto work = [&] {
    AucBins bins;
    int64_t positives = 0;
    for (int f = next++; f < o.files; f = next++) {
      char name[64];
      std::snprintf(name, sizeof name, "/part-%05d.tsv%s", f, o.gzip ? ".gz" : "");
      CriteoSynthFile& out = result.files[f];
      out.path = dir + name;
      const int64_t begin = o.lines * f / o.files, end = o.lines * (f + 1) / o.files;
      out.lines = end - begin;
      FILE* plain = nullptr;
      gzFile gz = nullptr;
      if (o.gzip) gz = gzopen(out.path.c_str(), "wb1");
      else plain = std::fopen(out.path.c_str(), "wb");
      bool ok = plain || gz;
      std::string text;
      for (int64_t i = begin; ok && i < end; ++i) {
        const CriteoSynthLabel y = synth.AppendLine(i, &text);
        text += '\n';
        bins.Add(y.probability, y.label);
        positives += y.label;
        if (text.size() >= (1 << 20) || i + 1 == end) {
          ok = o.gzip ? gzwrite(gz, text.data(), static_cast<unsigned>(text.size())) == static_cast<int>(text.size())
                      : std::fwrite(text.data(), 1, text.size(), plain) == text.size();
          text.clear();
        }
      }
      if (gz) ok = gzclose(gz) == Z_OK && ok;
      if (plain) ok = std::fclose(plain) == 0 && ok;
      struct stat st;
      if (ok && ::stat(out.path.c_str(), &st) == 0) out.bytes = st.st_size;
      if (!ok) {
        std::lock_guard<std::mutex> l(mu);
        if (error.ok()) error = Unavailable("cannot write '" + out.path + "'");
        return;
      }
    }
    std::lock_guard<std::mutex> l(mu);
    all.Merge(bins);
    result.positives += positives;
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  if (!error.ok()) return error;
  result.lines = o.lines;
  result.planted_auc = all.Auc();
  return result;
}

}  // namespace sf::examples
