// Incremental checkpoints: increments of changed rows over a full base,
// composed on read, compacted, and kept by retention while needed.
#include <zlib.h>

#include <catch2/catch.hpp>

#include <map>

#include "storage/checkpoint.h"

using namespace sf;

namespace {

bool Contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// A 10x2 float table whose row r holds (r + base, -r - base).
Tensor Table(float base) {
  std::vector<float> v;
  for (int r = 0; r < 10; ++r) {
    v.push_back(r + base);
    v.push_back(-r - base);
  }
  return Tensor::FromVector<float>(v, {10, 2});
}

// Sets rows of t to (value, -value) in place.
void SetRows(Tensor& t, const std::vector<int64_t>& rows, float value) {
  for (int64_t r : rows) {
    t.data<float>()[2 * r] = value;
    t.data<float>()[2 * r + 1] = -value;
  }
}

// Saves table (every row, or changed rows over parent) plus a scalar; blocks
// of 2 rows (16 bytes) so the changed rows span several blocks.
int64_t Save(KvStore* kv, const Tensor& table, int64_t step, int64_t parent = -1,
             const std::vector<int64_t>& changed = {}) {
  auto w = CheckpointWriter::Begin(kv, step, /*block_bytes=*/16);
  REQUIRE(w.ok());
  if (parent >= 0) {
    REQUIRE((*w)->SetParent(parent).ok());
    REQUIRE((*w)->AddRows("t", table, changed).ok());
  } else {
    REQUIRE((*w)->Add("t", table).ok());
  }
  REQUIRE((*w)->Add("step", Tensor::Scalar<int64_t>(step)).ok());
  auto id = (*w)->Commit();
  REQUIRE(id.ok());
  return *id;
}

// A chain: base (id 1), +rows {1,2,7} (id 2), +rows {2,9} (id 3); the
// expected values of each by independent bookkeeping.
struct Chain {
  std::unique_ptr<KvStore> kv = NewInMemoryKvStore();
  std::map<int64_t, Tensor> expected;
  Chain() {
    Tensor t = Table(0).Copy();
    expected[Save(kv.get(), t, 10)] = t.Copy();
    SetRows(t, {1, 2, 7}, 100);
    expected[Save(kv.get(), t, 20, 1, {1, 2, 7})] = t.Copy();
    SetRows(t, {2, 9}, 200);
    expected[Save(kv.get(), t, 30, 2, {2, 9})] = t.Copy();
  }
};

}  // namespace

TEST_CASE("incremental checkpoint: base + 2 increments compose to the full values", "[storage][incremental]") {
  Chain c;
  CheckpointReader r(c.kv.get());
  auto info = r.Manifest(3);
  REQUIRE(info.ok());
  CHECK(info->parent == 2);
  CHECK(info->global_step == 30);
  REQUIRE(info->Find("t"));
  CHECK(info->Find("t")->stored_rows == 2);
  CHECK(info->Find("t")->shape == Shape{10, 2});
  auto chain = r.Chain(3);
  REQUIRE(chain.ok());
  REQUIRE(chain->size() == 3);
  CHECK((*chain)[0].id == 1);
  for (int64_t id = 1; id <= 3; ++id) {
    auto all = r.ReadAll(id);
    REQUIRE(all.ok());
    CHECK((*all)["t"].ToVector<float>() == c.expected[id].ToVector<float>());
    CHECK((*all)["step"].scalar_as<int64_t>() == id * 10);
  }
  // Reading an increment's partial variable alone is refused (it needs the chain).
  CHECK(r.Read(*info, "t").status().code() == Code::kInvalidArgument);
}

TEST_CASE("incremental checkpoint: compaction gives the same values as a full base", "[storage][incremental]") {
  Chain c;
  auto id = CompactCheckpoint(c.kv.get(), 3);
  REQUIRE(id.ok());
  CHECK(*id == 4);
  CheckpointReader r(c.kv.get());
  auto info = r.Manifest(*id);
  REQUIRE(info.ok());
  CHECK(info->parent == -1);
  CHECK(info->global_step == 30);
  CHECK(info->Find("t")->stored_rows == -1);
  auto all = r.ReadAll(*id);
  REQUIRE(all.ok());
  CHECK((*all)["t"].ToVector<float>() == c.expected[3].ToVector<float>());
  // The compacted checkpoint stands alone: retention may drop the old chain.
  auto deleted = RetainCheckpoints(c.kv.get(), 1);
  REQUIRE(deleted.ok());
  CHECK(*deleted == std::vector<int64_t>{1, 2, 3});
  all = r.ReadAll(*id);
  REQUIRE(all.ok());
  CHECK((*all)["t"].ToVector<float>() == c.expected[3].ToVector<float>());
}

TEST_CASE("incremental checkpoint: a corrupt increment is named, the previous one is offered",
          "[storage][incremental]") {
  Chain c;
  // Flip a byte in the newest increment's only data block (rows 2 and 9 -> block 0).
  char key[96];
  std::snprintf(key, sizeof(key), "data/%020lld/t#0000#%010lld", 3LL, 0LL);
  std::string block = *c.kv->Get(key);
  block[5] ^= 0x10;
  REQUIRE(c.kv->Put(key, block).ok());
  CheckpointReader r(c.kv.get());
  Status s = r.Verify(3);
  CHECK(s.code() == Code::kDataLoss);
  CHECK(Contains(s.message(), "checkpoint 3"));
  CHECK(Contains(s.message(), "increment on checkpoint 2"));
  CHECK(Contains(s.message(), "variable 't'"));
  CHECK(Contains(s.message(), "checksum"));
  std::vector<Status> skipped;
  auto ok = r.LatestReadable(-1, &skipped);
  REQUIRE(ok.ok());
  CHECK(*ok == 2);
  CHECK(skipped.size() == 1);

  // A corrupt row-index block is named too.
  std::snprintf(key, sizeof(key), "data/%020lld/t#0000#rows", 2LL);
  block = *c.kv->Get(key);
  block[6] ^= 0x01;
  REQUIRE(c.kv->Put(key, block).ok());
  s = r.Verify(2);
  CHECK(s.code() == Code::kDataLoss);
  CHECK(Contains(s.message(), "checkpoint 2"));
  CHECK(Contains(s.message(), "row indices"));
  CHECK(*r.LatestReadable() == 1);
}

TEST_CASE("incremental checkpoint: a missing base is named", "[storage][incremental]") {
  Chain c;
  REQUIRE(DeleteCheckpoint(c.kv.get(), 1).ok());
  Status s = CheckpointReader(c.kv.get()).Verify(3);
  CHECK(s.code() == Code::kDataLoss);
  CHECK(Contains(s.message(), "checkpoint 2 is an increment on checkpoint 1"));
}

TEST_CASE("incremental checkpoint: retention keeps the bases kept increments need", "[storage][incremental]") {
  Chain c;  // 1 <- 2 <- 3
  Tensor t = c.expected[3].Copy();
  const int64_t full = Save(c.kv.get(), t, 40);  // 4: a new full base
  SetRows(t, {0}, 300);
  const int64_t inc = Save(c.kv.get(), t, 50, full, {0});  // 5 <- 4
  (void)inc;
  // keep_last 2 keeps 4 and 5: the old chain goes.
  auto deleted = RetainCheckpoints(c.kv.get(), 2);
  REQUIRE(deleted.ok());
  CHECK(*deleted == std::vector<int64_t>{1, 2, 3});

  Chain d;  // keep_last 1 of 1 <- 2 <- 3 must keep all three
  deleted = RetainCheckpoints(d.kv.get(), 1);
  REQUIRE(deleted.ok());
  CHECK(deleted->empty());
  auto all = CheckpointReader(d.kv.get()).ReadAll(3);
  REQUIRE(all.ok());
  CHECK((*all)["t"].ToVector<float>() == d.expected[3].ToVector<float>());
}

TEST_CASE("incremental checkpoint: bad increments are refused", "[storage][incremental]") {
  Chain c;
  auto w = CheckpointWriter::Begin(c.kv.get(), 1);
  REQUIRE(w.ok());
  // Changed rows without a parent, a missing parent, unsorted or out-of-range rows.
  CHECK((*w)->AddRows("t", Table(0), {1}).code() == Code::kInvalidArgument);
  CHECK((*w)->SetParent(99).code() == Code::kNotFound);
  REQUIRE((*w)->SetParent(3).ok());
  Status s = (*w)->AddRows("t", Table(0), {3, 1});
  CHECK(s.code() == Code::kInvalidArgument);
  CHECK(Contains(s.message(), "variable 't'"));
  CHECK((*w)->AddRows("t", Table(0), {10}).code() == Code::kInvalidArgument);
  CHECK((*w)->AddTable({"emb", 10, 11, "mod"}).code() == Code::kInvalidArgument);
  CHECK((*w)->AddTable({"emb", 10, 2, "hash"}).code() == Code::kInvalidArgument);
  REQUIRE((*w)->AddTable({"emb", 10, 2, "range"}).ok());
  REQUIRE((*w)->AddRows("t", Table(5), {}).ok());  // nothing changed
  auto id = (*w)->Commit();
  REQUIRE(id.ok());
  CheckpointReader r(c.kv.get());
  auto info = r.Manifest(*id);
  REQUIRE(info.ok());
  REQUIRE(info->FindTable("emb"));
  CHECK(info->FindTable("emb")->partition == "range");
  auto all = r.ReadAll(*id);
  REQUIRE(all.ok());
  CHECK((*all)["t"].ToVector<float>() == c.expected[3].ToVector<float>());
  CHECK(all->count("step") == 0);  // not listed in the newest manifest
}

TEST_CASE("incremental checkpoint: a version 1 manifest still reads as a full checkpoint", "[storage][incremental]") {
  auto kv = NewInMemoryKvStore();
  const Tensor t = Table(3);
  const int64_t id = Save(kv.get(), t, 10);
  // The layout before increments: no parent, tables or stored-row counts.
  const std::string body = "sfckpt 1\nid 1\nstep 10\nvars 1\nvar t float32 0 2 5 2 10 2\n";
  char crc[16];
  std::snprintf(crc, sizeof(crc), "%08lx",
                crc32(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(body.data()), body.size()));
  REQUIRE(kv->Put("manifest/00000000000000000001", body + "crc " + crc + "\n").ok());
  CheckpointReader r(kv.get());
  auto info = r.Manifest(id);
  REQUIRE(info.ok());
  CHECK(info->parent == -1);
  CHECK(info->tables.empty());
  auto all = r.ReadAll(id);
  REQUIRE(all.ok());
  CHECK((*all)["t"].ToVector<float>() == t.ToVector<float>());
}
