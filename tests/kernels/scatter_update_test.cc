// ResourceScatterUpdate (TF's ScatterUpdate): ApplyAssignRows against a
// row-by-row reference over dtypes, ranks and index types; bad input refused
// naming the variable and the problem, with nothing written; the op through
// the reference evaluator and its shape function.
#include <catch2/catch.hpp>

#include <cstring>
#include <random>
#include <vector>

#include "kernels/in_memory_variables.h"
#include "shardflow/ops.h"
#include "tests/support/eval_graph.h"

using namespace sf;

namespace {

// A tensor of dtype and shape filled with small seeded values.
Tensor Filled(DType dtype, const Shape& shape, std::mt19937& rng) {
  Tensor t(dtype, shape);
  std::uniform_int_distribution<int> d(-50, 50);
  DispatchNumeric(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!std::is_same_v<T, bool>) {
      for (int64_t i = 0; i < t.num_elements(); ++i) t.data<T>()[i] = static_cast<T>(d(rng)) / static_cast<T>(2);
    }
  });
  return t;
}

// The reference: every row of dim 0 takes the update of the last index naming it.
Tensor Reference(const Tensor& var, const std::vector<int64_t>& idx, const Tensor& rows) {
  Tensor out = var.Copy();
  const size_t row_bytes = var.bytes() / static_cast<size_t>(var.shape()[0]);
  for (int64_t r = 0; r < var.shape()[0]; ++r) {
    int64_t last = -1;
    for (size_t i = 0; i < idx.size(); ++i)
      if (idx[i] == r) last = static_cast<int64_t>(i);
    if (last >= 0)
      std::memcpy(static_cast<char*>(out.raw_data()) + r * row_bytes,
                  static_cast<const char*>(rows.raw_data()) + last * row_bytes, row_bytes);
  }
  return out;
}

bool SameBytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.raw_data(), b.raw_data(), a.bytes()) == 0;
}

Tensor Indices(DType dtype, const std::vector<int64_t>& v, Shape shape) {
  if (dtype == DType::kInt64) return Tensor::FromVector(v, std::move(shape));
  return Tensor::FromVector(std::vector<int32_t>(v.begin(), v.end()), std::move(shape));
}

void CheckRefused(const Status& s, Code code, const std::vector<std::string>& words) {
  INFO(s.ToString());
  CHECK(s.code() == code);
  for (const auto& w : words) CHECK(s.message().find(w) != std::string::npos);
}

}  // namespace

TEST_CASE("ApplyAssignRows equals the row-by-row reference on every dtype, rank and index type",
          "[kernels][scatter_update]") {
  std::mt19937 rng(39);
  int cases = 0;
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64}) {
    for (const Shape& var_shape : {Shape{7}, Shape{6, 3}, Shape{5, 2, 4}}) {
      for (DType idx_type : {DType::kInt32, DType::kInt64}) {
        for (const Shape& idx_shape : {Shape{4}, Shape{2, 3}, Shape{0}}) {
          Tensor var = Filled(dtype, var_shape, rng);
          int64_t n = 1;
          for (int64_t d : idx_shape) n *= d;
          std::uniform_int_distribution<int64_t> row(0, var_shape[0] - 1);
          std::vector<int64_t> idx(static_cast<size_t>(n));
          for (auto& i : idx) i = row(rng);
          if (n >= 3) idx[2] = idx[0];  // a duplicate: the later one must win
          Shape rows_shape = idx_shape;
          rows_shape.insert(rows_shape.end(), var_shape.begin() + 1, var_shape.end());
          Tensor rows = Filled(dtype, rows_shape, rng);
          const Tensor want = Reference(var, idx, rows);
          const Tensor snapshot = var;  // a reader's snapshot: must keep the old rows
          const Tensor before = var.Copy();
          Tensor written;
          INFO(DTypeName(dtype) << ShapeString(var_shape) << " indices " << DTypeName(idx_type)
                                << ShapeString(idx_shape));
          REQUIRE(ApplyAssignRows("v", Indices(idx_type, idx, idx_shape), rows, &var, &written).ok());
          CHECK(SameBytes(var, want));
          CHECK(SameBytes(snapshot, before));
          CHECK(written.ToVector<int64_t>() == idx);
          ++cases;
        }
      }
    }
  }
  CHECK(cases == 72);
}

TEST_CASE("ApplyAssignRows writes in place when it holds the only reference", "[kernels][scatter_update]") {
  Tensor var = Tensor::FromVector(std::vector<float>{1, 2, 3, 4}, Shape{2, 2});
  const void* buffer = var.raw_data();
  REQUIRE(ApplyAssignRows("v", Tensor::FromVector(std::vector<int64_t>{1}),
                          Tensor::FromVector(std::vector<float>{7, 8}, Shape{1, 2}), &var)
              .ok());
  CHECK(var.raw_data() == buffer);  // a big table is not copied per update
  CHECK(var.ToVector<float>() == std::vector<float>{1, 2, 7, 8});
}

TEST_CASE("ApplyAssignRows refuses bad input naming the variable and writes nothing", "[kernels][scatter_update]") {
  const Tensor init = Tensor::FromVector(std::vector<float>{1, 2, 3, 4, 5, 6}, Shape{3, 2});
  Tensor var = init.Copy();
  auto run = [&](const Tensor& idx, const Tensor& rows) { return ApplyAssignRows("emb", idx, rows, &var); };
  const Tensor two_rows = Tensor::FromVector(std::vector<float>{9, 9, 9, 9}, Shape{2, 2});
  // The first index is good: a refusal must come before any row is written.
  CheckRefused(run(Tensor::FromVector(std::vector<int64_t>{0, 3}), two_rows), Code::kInvalidArgument,
               {"'emb'", "index 3", "[0, 3)"});
  CheckRefused(run(Tensor::FromVector(std::vector<int32_t>{1, -1}), two_rows), Code::kInvalidArgument,
               {"'emb'", "index -1"});
  CheckRefused(run(Tensor::FromVector(std::vector<float>{0, 1}), two_rows), Code::kInvalidArgument,
               {"'emb'", "int32 or int64", "float32"});
  CheckRefused(run(Tensor::FromVector(std::vector<int64_t>{0, 1}), Tensor::FromVector(std::vector<double>{1, 2, 3, 4}, Shape{2, 2})),
               Code::kInvalidArgument, {"'emb'", "float32", "float64"});
  CheckRefused(run(Tensor::FromVector(std::vector<int64_t>{0, 1}), Tensor::FromVector(std::vector<float>{1, 2, 3, 4}, Shape{2, 1, 2})),
               Code::kInvalidArgument, {"'emb'", "[2,1,2]", "[2,2]"});
  CHECK(SameBytes(var, init));

  Tensor scalar = Tensor::Scalar<float>(1);
  CheckRefused(ApplyAssignRows("s", Tensor::FromVector(std::vector<int64_t>{0}), Tensor::FromVector(std::vector<float>{2}), &scalar),
               Code::kInvalidArgument, {"'s'", "scalar"});
  Tensor none;
  CheckRefused(ApplyAssignRows("u", Tensor::FromVector(std::vector<int64_t>{0}), two_rows, &none),
               Code::kFailedPrecondition, {"'u'", "initialised"});
}

TEST_CASE("ResourceScatterUpdate through the evaluator: rows replaced, bad graphs refused when built",
          "[kernels][scatter_update]") {
  Graph g;
  Output h = ops::VarHandle(g, "table", DType::kInt64, PartialShape({4, 2}), "table");
  Output init = ops::Const(g, Tensor::FromVector(std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}, Shape{4, 2}));
  Output idx = ops::Const(g, Tensor::FromVector(std::vector<int32_t>{3, 0, 3}));
  Output upd = ops::Const(g, Tensor::FromVector(std::vector<int64_t>{10, 11, 20, 21, 30, 31}, Shape{3, 2}));
  Operation assign(&g, ops::Assign(g, h, init).node);
  Operation scatter = ops::ResourceScatterUpdate(g, h, idx, upd);
  REQUIRE(scatter.valid());
  Output read = ops::ReadVariable(g, h, DType::kInt64);
  InMemoryVariables vars;
  REQUIRE(testing::EvalGraph(g, {}, {}, {assign}, &vars).ok());
  REQUIRE(testing::EvalGraph(g, {}, {}, {scatter}, &vars).ok());
  auto r = testing::Eval(g, read, {}, &vars);
  REQUIRE(r.ok());
  CHECK(r->ToVector<int64_t>() == std::vector<int64_t>{20, 21, 2, 3, 4, 5, 30, 31});

  // An out-of-range index fails the step naming the variable and the index.
  Output far = ops::Const(g, Tensor::FromVector(std::vector<int64_t>{4}));
  Output one = ops::Const(g, Tensor::FromVector(std::vector<int64_t>{9, 9}, Shape{1, 2}));
  Operation bad = ops::ResourceScatterUpdate(g, h, far, one);
  REQUIRE(bad.valid());
  auto s = testing::EvalGraph(g, {}, {}, {bad}, &vars);
  CheckRefused(s.status(), Code::kInvalidArgument, {"'table'", "index 4"});
  r = testing::Eval(g, read, {}, &vars);
  REQUIRE(r.ok());
  CHECK(r->ToVector<int64_t>() == std::vector<int64_t>{20, 21, 2, 3, 4, 5, 30, 31});

  // The shape function refuses what it can see: the dtype, the updates' shape, float indices.
  Output f32 = ops::Const(g, Tensor::FromVector(std::vector<float>{1, 2}, Shape{1, 2}));
  CHECK_FALSE(ops::ResourceScatterUpdate(g, h, far, f32).valid());
  CheckRefused(g.status(), Code::kInvalidArgument, {"'table'", "int64", "float32"});
  Graph g2;
  Output h2 = ops::VarHandle(g2, "m", DType::kFloat32, PartialShape({4, 2}), "m");
  Output i2 = ops::Const(g2, Tensor::FromVector(std::vector<int64_t>{0, 1}));
  CHECK_FALSE(ops::ResourceScatterUpdate(g2, h2, i2, ops::Const(g2, Tensor::FromVector(std::vector<float>{1, 2}))).valid());
  CheckRefused(g2.status(), Code::kInvalidArgument, {"'m'", "[2,2]"});
  Graph g3;
  Output h3 = ops::VarHandle(g3, "m", DType::kFloat32, PartialShape({4}), "m");
  Output fi = ops::Const(g3, Tensor::FromVector(std::vector<float>{0}));
  CHECK_FALSE(ops::ResourceScatterUpdate(g3, h3, fi, ops::Const(g3, Tensor::FromVector(std::vector<float>{1}))).valid());
  CheckRefused(g3.status(), Code::kInvalidArgument, {"int32 or int64"});
}
