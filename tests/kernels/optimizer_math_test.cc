#include <catch2/catch.hpp>

#include <cmath>

#include "kernels/compute_pool.h"
#include "kernels/embedding_math.h"
#include "kernels/optimizer_math.h"

using namespace sf;

namespace {

// Runs `steps` updates with the same gradient on var and slots (float64).
std::vector<Tensor> RunSteps(ApplyRequest req, std::vector<Tensor> vars, int steps) {
  for (int s = 0; s < steps; ++s) {
    std::vector<Tensor*> p;
    for (auto& t : vars) p.push_back(&t);
    Status st = ApplyOptimizerUpdate(req, p);
    REQUIRE(st.ok());
  }
  return vars;
}

Tensor V(std::vector<double> v) { return Tensor::FromVector(v); }
Tensor S(double v) { return Tensor::Scalar<double>(v); }

void CheckNear(const Tensor& t, std::vector<double> want) {
  auto got = t.ToVector<double>();
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) CHECK(got[i] == Approx(want[i]).epsilon(1e-9).margin(1e-12));
}

ApplyRequest Req(OptimizerKind opt, std::vector<Tensor> scalars) {
  ApplyRequest r;
  r.optimizer = opt;
  r.scalars = std::move(scalars);
  r.grad = V({0.5, -1.0});
  return r;
}

}  // namespace

TEST_CASE("GradientDescent: two steps", "[optimizer]") {
  auto v = RunSteps(Req(OptimizerKind::kGradientDescent, {S(0.1)}), {V({1.0, 2.0})}, 2);
  CheckNear(v[0], {0.9, 2.2});
}

TEST_CASE("Momentum: two steps, plain and Nesterov", "[optimizer]") {
  auto v = RunSteps(Req(OptimizerKind::kMomentum, {S(0.1), S(0.9)}), {V({1.0, 2.0}), V({0, 0})}, 2);
  // accum: [0.5,-1] then [0.95,-1.9]; var -= 0.1 * accum each step.
  CheckNear(v[1], {0.95, -1.9});
  CheckNear(v[0], {0.855, 2.29});
  auto r = Req(OptimizerKind::kMomentum, {S(0.1), S(0.9)});
  r.use_nesterov = true;
  auto n = RunSteps(r, {V({1.0, 2.0}), V({0, 0})}, 2);
  // var -= lr * grad + lr * momentum * accum: 0.05 + 0.045, then 0.05 + 0.0855.
  CheckNear(n[0], {1.0 - 0.095 - 0.1355, 2.0 + 0.19 + 0.271});
}

TEST_CASE("Adagrad: two steps", "[optimizer]") {
  auto v = RunSteps(Req(OptimizerKind::kAdagrad, {S(0.1)}), {V({1.0, 2.0}), V({0.1, 0.1})}, 2);
  CheckNear(v[1], {0.6, 2.1});
  CheckNear(v[0], {1.0 - 0.05 / std::sqrt(0.35) - 0.05 / std::sqrt(0.6),
                   2.0 + 0.1 / std::sqrt(1.1) + 0.1 / std::sqrt(2.1)});
}

TEST_CASE("Adam: two steps with bias correction and beta powers", "[optimizer]") {
  auto v = RunSteps(Req(OptimizerKind::kAdam, {S(0.1), S(0.9), S(0.999), S(1e-8)}),
                    {V({1.0, 2.0}), V({0, 0}), V({0, 0}), S(0.9), S(0.999)}, 2);
  // m: 0.05 then 0.095; v: 0.00025 then 0.00049975 (first element).
  CheckNear(v[1], {0.095, -0.19});
  CheckNear(v[2], {0.00049975, 0.001999});
  CheckNear(v[3], {0.729});
  CheckNear(v[4], {0.999 * 0.999 * 0.999});
  // Step 1: alpha = 0.1*sqrt(0.001)/0.1; step 2: alpha = 0.1*sqrt(0.001999)/0.19.
  const double a1 = 0.1 * std::sqrt(1 - 0.999) / (1 - 0.9);
  const double a2 = 0.1 * std::sqrt(1 - 0.998001) / (1 - 0.81);
  const double x = 1.0 - a1 * 0.05 / (std::sqrt(0.00025) + 1e-8) -
                   a2 * 0.095 / (std::sqrt(0.00049975) + 1e-8);
  const double y = 2.0 + a1 * 0.1 / (std::sqrt(0.001) + 1e-8) +
                   a2 * 0.19 / (std::sqrt(0.001999) + 1e-8);
  CheckNear(v[0], {x, y});
  // A constant gradient moves Adam by about lr per step.
  CHECK(x == Approx(0.8).epsilon(1e-5));
}

TEST_CASE("RMSProp: two steps", "[optimizer]") {
  auto v = RunSteps(Req(OptimizerKind::kRMSProp, {S(0.1), S(0.9), S(0.5), S(1e-10)}),
                    {V({1.0, 2.0}), V({1, 1}), V({0, 0})}, 2);
  CheckNear(v[1], {0.8575, 1.0});
  const double m1 = 0.1 * 0.5 / std::sqrt(0.925 + 1e-10);
  const double m2 = 0.5 * m1 + 0.1 * 0.5 / std::sqrt(0.8575 + 1e-10);
  const double n1 = -0.1 / std::sqrt(1.0 + 1e-10);
  const double n2 = 0.5 * n1 - 0.1 / std::sqrt(1.0 + 1e-10);
  CheckNear(v[2], {m2, n2});
  CheckNear(v[0], {1.0 - m1 - m2, 2.0 - n1 - n2});
}

TEST_CASE("Optimizer updates work in float32", "[optimizer]") {
  ApplyRequest r;
  r.optimizer = OptimizerKind::kGradientDescent;
  r.scalars = {Tensor::Scalar<float>(0.5f)};
  r.grad = Tensor::FromVector(std::vector<float>{2, 4});
  Tensor var = Tensor::FromVector(std::vector<float>{1, 1});
  REQUIRE(ApplyOptimizerUpdate(r, {&var}).ok());
  CHECK(var.ToVector<float>() == std::vector<float>{0, -1});
}

TEST_CASE("Optimizer errors name the optimizer and the shapes", "[optimizer]") {
  auto r = Req(OptimizerKind::kMomentum, {S(0.1), S(0.9)});
  Tensor var = V({1, 2}), accum = V({0, 0, 0});
  Status s = ApplyOptimizerUpdate(r, {&var, &accum});
  REQUIRE_FALSE(s.ok());
  CHECK(s.message().find("Momentum") != std::string::npos);
  CHECK(s.message().find("[3]") != std::string::npos);
  CHECK(s.message().find("[2]") != std::string::npos);
  CHECK(var.ToVector<double>() == std::vector<double>{1, 2});

  auto bad = Req(OptimizerKind::kGradientDescent, {S(0.1)});
  bad.grad = Tensor::FromVector(std::vector<float>{1, 1});
  Tensor v2 = V({1, 2});
  s = ApplyOptimizerUpdate(bad, {&v2});
  REQUIRE_FALSE(s.ok());
  CHECK(s.message().find("float32") != std::string::npos);

  CHECK_FALSE(ApplyOptimizerUpdate(Req(OptimizerKind::kCount, {}), {&v2}).ok());
  CHECK_FALSE(ApplyOptimizerUpdate(Req(OptimizerKind::kAdagrad, {S(0.1)}), {&v2}).ok());  // slot missing
}

TEST_CASE("Optimizer hyperparameters must be float32 or float64 scalars", "[optimizer][bad_input]") {
  // A float16 learning rate cannot be read as a number here: it must be an
  // error, not a silent learning rate of 0.
  Tensor half_lr(DType::kFloat16, {});
  Tensor var = V({1, 2});
  Status s = ApplyOptimizerUpdate(Req(OptimizerKind::kGradientDescent, {half_lr}), {&var});
  REQUIRE_FALSE(s.ok());
  CHECK(s.message().find("hyperparameter 0") != std::string::npos);
  CHECK(var.ToVector<double>() == std::vector<double>{1, 2});
  s = ApplyOptimizerUpdate(Req(OptimizerKind::kGradientDescent, {Tensor::Scalar<int32_t>(1)}), {&var});
  REQUIRE_FALSE(s.ok());
  CHECK(ApplyOptimizerUpdate(Req(OptimizerKind::kGradientDescent, {Tensor::Scalar<float>(0.5f)}), {&var}).ok());
  CheckNear(var, {0.75, 2.5});
}

namespace {

// A float32 [rows, dim] tensor with distinct positive values from seed.
Tensor Table(int64_t rows, int64_t dim, float seed) {
  Tensor t(DType::kFloat32, {rows, dim});
  float* p = t.data<float>();
  for (int64_t i = 0; i < rows * dim; ++i) p[i] = 0.25f + 0.5f * std::fabs(std::sin(seed + 0.7f * i));
  return t;
}

// The rows `rows` of t, in that order.
Tensor Rows(const Tensor& t, const std::vector<int64_t>& rows) {
  const int64_t dim = t.dim(1);
  Tensor out(DType::kFloat32, {static_cast<int64_t>(rows.size()), dim});
  for (size_t r = 0; r < rows.size(); ++r)
    std::copy(t.data<float>() + rows[r] * dim, t.data<float>() + (rows[r] + 1) * dim,
              out.data<float>() + r * dim);
  return out;
}

}  // namespace

TEST_CASE("Dense and sparse updates of the same rows agree for every optimizer", "[optimizer]") {
  // Hyperparameters taken in order as each optimizer needs them: lr, then
  // momentum or beta1 or rho, beta2 or RMSProp's momentum, epsilon.
  const std::vector<float> hypers = {0.1f, 0.9f, 0.999f, 1e-8f};
  for (const OptimizerSpec& spec : kOptimizers) {
    for (const int64_t dim : {3, 19}) {  // a row shorter than a vector, and one with a tail
      for (const bool nesterov : {false, true}) {
        INFO(spec.name << " dim " << dim << (nesterov ? " nesterov" : ""));
        const int64_t rows = 7;
        const int row_slots = spec.handles - 1 - spec.scalar_slots;
        // The table and its slots; the scalar slots (Adam's beta powers) at 0.9, 0.999.
        std::vector<Tensor> table;
        for (int i = 0; i < spec.handles; ++i) {
          if (i <= row_slots) table.push_back(Table(rows, dim, static_cast<float>(i)));
          else table.push_back(Tensor::Scalar<float>(i == row_slots + 1 ? 0.9f : 0.999f));
        }
        // Dense: the touched rows alone, as one variable of their own.
        const std::vector<int64_t> touched = {4, 1, 3};
        std::vector<Tensor> dense;
        for (int i = 0; i < spec.handles; ++i)
          dense.push_back(i <= row_slots ? Rows(table[i], touched) : table[i].Copy());
        std::vector<Tensor> scalars;
        for (int i = 0; i < spec.scalars; ++i) scalars.push_back(Tensor::Scalar<float>(hypers[i]));
        for (int step = 0; step < 2; ++step) {
          // Sparse: row 1 given twice, summed before its one update.
          const Tensor g4 = Table(4, dim, 10.0f + step);
          SparseApplyRequest sreq;
          sreq.optimizer = spec.kind;
          sreq.scalars = scalars;
          sreq.use_nesterov = nesterov;
          sreq.indices = Tensor::FromVector(std::vector<int64_t>{4, 1, 3, 1});
          sreq.values = g4;
          std::vector<Tensor*> tp;
          for (auto& t : table) tp.push_back(&t);
          REQUIRE(ApplySparseOptimizerUpdate(sreq, tp).ok());
          ApplyRequest dreq;
          dreq.optimizer = spec.kind;
          dreq.scalars = scalars;
          dreq.use_nesterov = nesterov;
          dreq.grad = Rows(g4, {0, 1, 2});
          for (int64_t j = 0; j < dim; ++j)
            dreq.grad.data<float>()[dim + j] += g4.data<float>()[3 * dim + j];
          std::vector<Tensor*> dp;
          for (auto& t : dense) dp.push_back(&t);
          REQUIRE(ApplyOptimizerUpdate(dreq, dp).ok());
        }
        for (int i = 0; i < spec.handles; ++i) {
          INFO("variable " << i);
          const std::vector<float> want = dense[i].ToVector<float>();
          const std::vector<float> got =
              (i <= row_slots ? Rows(table[i], touched) : table[i]).ToVector<float>();
          REQUIRE(got.size() == want.size());
          for (size_t k = 0; k < want.size(); ++k) CHECK(got[k] == Approx(want[k]).epsilon(1e-6));
          if (i > row_slots) continue;
          // Rows the sparse update did not touch keep their values (lazy).
          const Tensor before = Table(rows, dim, static_cast<float>(i));
          for (const int64_t r : {0, 2, 5, 6})
            CHECK(Rows(table[i], {r}).ToVector<float>() == Rows(before, {r}).ToVector<float>());
        }
      }
    }
  }
}

TEST_CASE("Sparse optimizer errors name the optimizer and the slot", "[optimizer]") {
  Tensor var = Table(3, 2, 0), acc = Table(4, 2, 1);
  SparseApplyRequest req;
  req.optimizer = OptimizerKind::kAdagrad;
  req.scalars = {Tensor::Scalar<float>(0.1f)};
  req.indices = Tensor::FromVector(std::vector<int64_t>{0});
  req.values = Table(1, 2, 2);
  Status s = ApplySparseOptimizerUpdate(req, {&var, &acc});
  REQUIRE_FALSE(s.ok());
  CHECK(s.message().find("sparse optimizer Adagrad") != std::string::npos);
  CHECK(s.message().find("slot 1") != std::string::npos);
  CHECK_FALSE(ApplySparseOptimizerUpdate(req, {&var}).ok());  // the slot missing
  req.optimizer = OptimizerKind::kCount;
  CHECK_FALSE(ApplySparseOptimizerUpdate(req, {&var, &acc}).ok());
}

TEST_CASE("A big dense update split into chunks over the pool equals updating it piece by piece",
          "[optimizer]") {
  // 133,000 elements: over the size split across the pool, and neither it nor
  // its rows a multiple of the chunk, so chunk and vector tails are exercised.
  const int64_t rows = 7000, dim = 19, piece = 50;
  const std::vector<float> hypers = {0.1f, 0.9f, 0.999f, 1e-8f};
  ComputePool pool(2);
  for (const OptimizerSpec& spec : kOptimizers) {
    INFO(spec.name);
    const int row_slots = spec.handles - 1 - spec.scalar_slots;
    std::vector<Tensor> whole;
    for (int i = 0; i < spec.handles; ++i) {
      if (i <= row_slots) whole.push_back(Table(rows, dim, static_cast<float>(i)));
      else whole.push_back(Tensor::Scalar<float>(i == row_slots + 1 ? 0.9f : 0.999f));
    }
    std::vector<Tensor> scalars;
    for (int i = 0; i < spec.scalars; ++i) scalars.push_back(Tensor::Scalar<float>(hypers[i]));
    // The reference: each piece of `piece` rows a variable of its own.
    std::vector<std::vector<Tensor>> pieces;
    for (int64_t r = 0; r < rows; r += piece) {
      std::vector<int64_t> idx;
      for (int64_t k = r; k < r + piece; ++k) idx.push_back(k);
      std::vector<Tensor> p;
      for (int i = 0; i < spec.handles; ++i) p.push_back(i <= row_slots ? Rows(whole[i], idx) : whole[i].Copy());
      pieces.push_back(std::move(p));
    }
    for (int step = 0; step < 2; ++step) {
      ApplyRequest req;
      req.optimizer = spec.kind;
      req.scalars = scalars;
      req.grad = Table(rows, dim, 20.0f + step);
      std::vector<Tensor*> wp;
      for (auto& t : whole) wp.push_back(&t);
      REQUIRE(ApplyOptimizerUpdate(req, wp, &pool).ok());
      for (size_t k = 0; k < pieces.size(); ++k) {
        std::vector<int64_t> idx;
        for (int64_t r = k * piece; r < (static_cast<int64_t>(k) + 1) * piece; ++r) idx.push_back(r);
        ApplyRequest preq = req;
        preq.grad = Rows(req.grad, idx);
        std::vector<Tensor*> pp;
        for (auto& t : pieces[k]) pp.push_back(&t);
        REQUIRE(ApplyOptimizerUpdate(preq, pp).ok());
      }
    }
    for (int i = 0; i <= row_slots; ++i) {
      INFO("variable " << i);
      const float* got = whole[i].data<float>();
      int64_t wrong = 0;
      for (size_t k = 0; k < pieces.size(); ++k) {
        const float* want = pieces[k][i].data<float>();
        for (int64_t j = 0; j < piece * dim; ++j)
          if (!(std::fabs(got[k * piece * dim + j] - want[j]) <= 1e-6f * std::fabs(want[j]) + 1e-7f)) ++wrong;
      }
      CHECK(wrong == 0);
    }
    for (int i = row_slots + 1; i < spec.handles; ++i)  // scalar slots advance once per update
      CHECK(whole[i].data<float>()[0] == pieces[0][i].data<float>()[0]);
  }
}
