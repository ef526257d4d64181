// The ring all-reduce's rank actors (actors/collectives.h) with chunks cut
// into small pieces: sizes that are no multiple of the piece or of the rank
// count, pieces delivered in shuffled order and before a rank contributed,
// and a peer's piece repeated or misplaced failing the reduction by name.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <random>
#include <utility>
#include <vector>

#include "actors/collectives.h"
#include "tests/support/caf_system.h"
#include "tests/support/random_values.h"
#include "tests/support/wait.h"

using namespace sf;
using namespace sf::runtime;
using namespace std::chrono_literals;

namespace {

using System = testing::CafSystem;

Tensor Input(DType dt, int r, int64_t size) {
  const std::vector<float> v = testing::Random(size, 1000 + r);
  Tensor t(dt, {size});
  for (int64_t i = 0; i < size; ++i) {
    if (dt == DType::kFloat32) t.data<float>()[i] = v[i] * (r + 1);
    else t.data<double>()[i] = double{v[i]} * (r + 1);
  }
  return t;
}

double At(const Tensor& t, int64_t i) {
  return t.dtype() == DType::kFloat32 ? double{t.data<float>()[i]} : t.data<double>()[i];
}

bool SameBytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.raw_data(), b.raw_data(), a.bytes()) == 0;
}

// Every rank's result: the sum of the inputs (to float precision), the same
// bits on every rank, the inputs untouched.
void CheckSums(const std::vector<Result<Tensor>>& out, const std::vector<Tensor>& in) {
  const int n = static_cast<int>(in.size());
  for (int r = 0; r < n; ++r) {
    INFO("rank " << r << ": " << out[r].status().ToString());
    REQUIRE(out[r].ok());
    REQUIRE(out[r]->shape() == in[r].shape());
    REQUIRE(SameBytes(*out[r], *out[0]));
    REQUIRE(SameBytes(in[r], Input(in[r].dtype(), r, in[r].num_elements())));
  }
  const double tol = in[0].dtype() == DType::kFloat32 ? 1e-6 * n : 1e-14 * n;
  for (int64_t i = 0; i < out[0]->num_elements(); ++i) {
    double ref = 0;
    for (const Tensor& t : in) ref += At(t, i);
    INFO("element " << i);
    REQUIRE(std::abs(At(*out[0], i) - ref) <= tol * (1 + std::abs(ref)));
  }
}

// Rank actors whose outgoing pieces the test holds and delivers itself, so
// it decides their order.
struct Ring {
  // What the actors' callbacks write: shared with them, since an actor may
  // still run a callback while the ring is being torn down.
  struct Shared {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<std::pair<int, CollectiveMsgPtr>> held;  // GUARDED_BY(mu): (destination rank, piece)
    int64_t sent = 0;                                      // GUARDED_BY(mu)
    int finished = 0;                                      // GUARDED_BY(mu)
    std::vector<Result<Tensor>> out;                       // GUARDED_BY(mu)
  };

  Ring(caf::actor_system& sys, int n, int64_t piece_bytes) : n(n), sh(std::make_shared<Shared>()) {
    sh->out.assign(n, Status());
    for (int r = 0; r < n; ++r) ranks.push_back(SpawnCollectiveRank(sys, "g", r, n, piece_bytes));
    for (int r = 0; r < n; ++r) {
      auto m = std::make_shared<CollectiveMsg>();
      m->kind = CollectiveMsg::kInit;
      m->forward = [sh = sh, dest = (r + 1) % n](CollectiveMsgPtr msg) {
        std::lock_guard<std::mutex> l(sh->mu);
        sh->held.emplace_back(dest, std::move(msg));
        ++sh->sent;
        sh->cv.notify_all();
      };
      caf::anon_send(ranks[r], std::move(m));
    }
  }
  ~Ring() {
    for (auto& r : ranks) caf::anon_send_exit(r, caf::exit_reason::user_shutdown);
  }

  void Contribute(int r, Tensor value) {
    auto m = std::make_shared<CollectiveMsg>();
    m->kind = CollectiveMsg::kContribute;
    m->value = std::move(value);
    m->done = [sh = sh, r](Result<Tensor> got) {
      std::lock_guard<std::mutex> l(sh->mu);
      sh->out[r] = std::move(got);
      ++sh->finished;
      sh->cv.notify_all();
    };
    caf::anon_send(ranks[r], std::move(m));
  }

  // Waits until no piece has been sent for a while, then takes them all
  // (the pause only decides how many pieces one shuffle mixes).
  std::vector<std::pair<int, CollectiveMsgPtr>> TakeQuiet() {
    std::unique_lock<std::mutex> l(sh->mu);
    for (;;) {
      const int64_t before = sh->sent;
      if (!sh->cv.wait_for(l, 20ms, [&] { return sh->sent != before; })) break;
    }
    return std::exchange(sh->held, {});
  }

  void Deliver(int dest, CollectiveMsgPtr m) { caf::anon_send(ranks[dest], std::move(m)); }

  // Delivers every held piece, in shuffled batches, until every rank has
  // its result (false when the deadline passes first); hook may change a
  // batch before it is delivered.
  bool RunShuffled(uint64_t seed,
                   const std::function<void(std::vector<std::pair<int, CollectiveMsgPtr>>&)>& hook = nullptr) {
    std::mt19937_64 rng(seed);
    const auto deadline = std::chrono::steady_clock::now() + 60s;
    while (std::chrono::steady_clock::now() < deadline) {
      {
        std::lock_guard<std::mutex> l(sh->mu);
        if (sh->finished == n) return true;
      }
      auto batch = TakeQuiet();
      std::shuffle(batch.begin(), batch.end(), rng);
      if (hook) hook(batch);
      for (auto& kv : batch) Deliver(kv.first, std::move(kv.second));
    }
    return false;
  }

  std::vector<Result<Tensor>> Results() {
    std::lock_guard<std::mutex> l(sh->mu);
    return sh->out;
  }

  int n;
  std::shared_ptr<Shared> sh;
  std::vector<CollectiveRankActor> ranks;
};

CollectiveMsgPtr Duplicate(const CollectiveMsg& m) {
  auto d = std::make_shared<CollectiveMsg>(m);
  d->value = m.value.Copy();
  return d;
}

}  // namespace

TEST_CASE("Collectives: pieces of any size sum every length, chunk and piece boundaries unaligned",
          "[actors][collectives]") {
  System s;
  for (int n : {2, 3, 4}) {
    // 16 bytes: 4 floats or 2 doubles per piece; 40 bytes: 10 floats (so
    // most pieces start unaligned and step 0 copies them); the default.
    for (int64_t piece_bytes : {int64_t{16}, int64_t{40}, kDefaultPieceBytes}) {
      CollectiveGroup group(s.sys, "g", n, piece_bytes);
      for (int64_t size : {int64_t{0}, int64_t{1}, int64_t{2}, int64_t{5}, int64_t{1001}, int64_t{4099}}) {
        for (DType dt : {DType::kFloat32, DType::kFloat64}) {
          INFO("n " << n << " piece " << piece_bytes << " bytes, size " << size << " " << DTypeName(dt));
          std::vector<Tensor> in;
          for (int r = 0; r < n; ++r) in.push_back(Input(dt, r, size));
          std::mutex mu;
          std::vector<Result<Tensor>> out(n, Status());
          int done = 0;
          for (int r = 0; r < n; ++r)
            group.Contribute(r, in[r], [&, r](Result<Tensor> got) {
              std::lock_guard<std::mutex> l(mu);
              out[r] = std::move(got);
              ++done;
            });
          REQUIRE(testing::WaitFor(
              [&] {
                std::lock_guard<std::mutex> l(mu);
                return done == n;
              },
              60s));
          std::lock_guard<std::mutex> l(mu);
          CheckSums(out, in);
        }
      }
    }
  }
}

TEST_CASE("Collectives: pieces delivered out of order, and before their rank contributes, still sum",
          "[actors][collectives]") {
  System s;
  for (int n : {2, 3}) {
    for (uint64_t seed : {1, 2, 3}) {
      INFO("n " << n << " seed " << seed);
      Ring ring(s.sys, n, 16);
      std::vector<Tensor> in;
      for (int r = 0; r < n; ++r) in.push_back(Input(DType::kFloat32, r, 1003));
      // Rank 0's step-0 pieces reach rank 1 before rank 1 contributes.
      ring.Contribute(0, in[0]);
      auto first = ring.TakeQuiet();
      REQUIRE(first.size() > 1);
      for (auto& kv : first) ring.Deliver(kv.first, std::move(kv.second));
      for (int r = 1; r < n; ++r) ring.Contribute(r, in[r]);
      REQUIRE(ring.RunShuffled(seed));
      CheckSums(ring.Results(), in);
    }
  }
}

TEST_CASE("Collectives: a piece repeated or at no piece's offset fails the reduction by name",
          "[actors][collectives]") {
  System s;
  for (bool repeat : {true, false}) {
    INFO((repeat ? "repeated" : "misplaced"));
    Ring ring(s.sys, 3, 16);
    std::vector<Tensor> in;
    for (int r = 0; r < 3; ++r) in.push_back(Input(DType::kFloat32, r, 100));
    for (int r = 0; r < 3; ++r) ring.Contribute(r, in[r]);
    bool tampered = false;
    REQUIRE(ring.RunShuffled(7, [&](std::vector<std::pair<int, CollectiveMsgPtr>>& batch) {
      if (tampered || batch.empty()) return;
      for (auto& kv : batch) {
        const CollectiveMsg& m = *kv.second;
        if (m.kind != CollectiveMsg::kChunk || !m.error.ok() || m.value.num_elements() < 2) continue;
        CollectiveMsgPtr bad = Duplicate(m);
        if (!repeat) bad->offset += 1;
        batch.emplace_back(kv.first, bad);
        tampered = true;
        return;
      }
    }));
    REQUIRE(tampered);
    int failed = 0;
    for (const Result<Tensor>& got : ring.Results()) {
      if (got.ok()) continue;
      ++failed;
      INFO(got.status().ToString());
      REQUIRE(got.status().code() == Code::kInvalidArgument);
      REQUIRE(got.status().message().find("all-reduce group 'g': rank ") != std::string::npos);
      REQUIRE(got.status().message().find(repeat ? " twice" : "where no piece of elements") != std::string::npos);
    }
    // The bad piece is a step-0 piece, so no rank can finish without it:
    // the rank that saw it fails and the error goes round the ring.
    REQUIRE(failed == 3);
  }
}
