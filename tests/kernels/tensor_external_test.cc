// Tensors over memory they do not own (Tensor::WrapExternal): what the
// Python module feeds NumPy arrays through without a copy.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdlib>
#include <vector>

#include "kernels/in_memory_variables.h"
#include "shardflow/tensor.h"

using namespace sf;

TEST_CASE("A wrapped buffer is shared without a copy and released once, by the last holder", "[kernels]") {
  alignas(64) float data[6] = {1, 2, 3, 4, 5, 6};
  int released = 0;
  {
    auto t = Tensor::WrapExternal(DType::kFloat32, {2, 3}, data, [&] { ++released; });
    REQUIRE(t.ok());
    CHECK(t->data<float>() == data);
    CHECK(t->ToVector<float>() == std::vector<float>{1, 2, 3, 4, 5, 6});
    Tensor copy = *t;  // shares
    CHECK(copy.SharesBufferWith(*t));
    auto r = copy.Reshaped({3, 2});
    REQUIRE(r.ok());
    CHECK(r->data<float>() == data);
    Tensor deep = t->Copy();
    CHECK(deep.data<float>() != data);
    CHECK(released == 0);
  }
  CHECK(released == 1);
}

TEST_CASE("A wrapped buffer is never unique, so nobody writes the owner's memory in place", "[kernels]") {
  alignas(64) int64_t data[2] = {7, 8};
  auto t = Tensor::WrapExternal(DType::kInt64, {2}, data, [] {});
  REQUIRE(t.ok());
  CHECK_FALSE(t->BufferIsUnique());
  CHECK(t->BufferIsLent());
  Tensor own = Tensor(DType::kInt64, {2});
  CHECK(own.BufferIsUnique());
  CHECK_FALSE(own.BufferIsLent());
  // State that outlives a step keeps its own copy of lent memory, never of its own.
  Tensor kept = t->Owned();
  CHECK(kept.data<int64_t>() != data);
  CHECK(kept.ToVector<int64_t>() == std::vector<int64_t>{7, 8});
  CHECK(own.Owned().SharesBufferWith(own));
}

TEST_CASE("WrapExternal refuses what it cannot wrap, naming why", "[kernels]") {
  alignas(64) char data[64] = {};
  auto noop = [] {};
  auto unaligned = Tensor::WrapExternal(DType::kFloat32, {2}, data + 4, noop);
  CHECK(unaligned.status().code() == Code::kInvalidArgument);
  CHECK(unaligned.status().message().find("aligned") != std::string::npos);
  CHECK(Tensor::WrapExternal(DType::kFloat32, {-1}, data, noop).status().message().find("negative") !=
        std::string::npos);
  CHECK(Tensor::WrapExternal(DType::kInvalid, {1}, data, noop).status().message().find("dtype") != std::string::npos);
  CHECK_FALSE(Tensor::WrapExternal(DType::kFloat32, {1}, nullptr, noop).ok());
  CHECK_FALSE(Tensor::WrapExternal(DType::kFloat32, {1}, data, nullptr).ok());
  // Zero elements need no memory at all.
  auto empty = Tensor::WrapExternal(DType::kFloat32, {0, 3}, nullptr, noop);
  REQUIRE(empty.ok());
  CHECK(empty->num_elements() == 0);
}

TEST_CASE("Assign takes a buffer nobody else holds and copies any other", "[kernels]") {
  Tensor stored;
  {
    // Only the message holds it (a restore's freshly read value): taken as is.
    Tensor fresh = Tensor::FromVector<float>({1, 2, 3}, {3});
    const float* p = fresh.data<float>();
    REQUIRE(ApplyAssign("v", DType::kFloat32, PartialShape({3}), AssignMode::kAssign, fresh, &stored).ok());
    CHECK(stored.data<float>() == p);
  }
  // Someone else still holds it: a copy, so in-place updates never reach theirs.
  Tensor held = Tensor::FromVector<float>({4, 5, 6}, {3});
  Tensor other = held;
  REQUIRE(ApplyAssign("v", DType::kFloat32, PartialShape({3}), AssignMode::kAssign, held, &stored).ok());
  CHECK_FALSE(stored.SharesBufferWith(held));
  CHECK(stored.ToVector<float>() == std::vector<float>{4, 5, 6});
  // Lent memory is never taken, even with one holder.
  alignas(64) float data[3] = {7, 8, 9};
  {
    auto lent = Tensor::WrapExternal(DType::kFloat32, {3}, data, [] {});
    REQUIRE(lent.ok());
    REQUIRE(ApplyAssign("v", DType::kFloat32, PartialShape({3}), AssignMode::kAssign, *lent, &stored).ok());
    CHECK(stored.data<float>() != data);
  }
  stored.data<float>()[0] = 0;
  CHECK(data[0] == 7);
}
