#include <zlib.h>

#include <catch2/catch.hpp>

#include <filesystem>
#include <map>

#include "storage/checkpoint.h"
#include "tests/support/temp_dir.h"

using namespace sf;

namespace {

bool Contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Saves w (5x3 float, blocks of 2 rows when block_bytes = 24) and step; returns the id.
int64_t SaveOne(KvStore* kv, float base, int64_t step) {
  auto w = CheckpointWriter::Begin(kv, step, /*block_bytes=*/24);
  REQUIRE(w.ok());
  std::vector<float> vals(15);
  for (int i = 0; i < 15; ++i) vals[i] = base + i;
  REQUIRE((*w)->Add("w", Tensor::FromVector<float>(vals, {5, 3})).ok());
  REQUIRE((*w)->Add("w/Adam/m", Tensor::FromVector<double>({base, 2.0}, {2})).ok());
  REQUIRE((*w)->Add("step", Tensor::Scalar<int64_t>(step)).ok());
  auto id = (*w)->Commit();
  REQUIRE(id.ok());
  return *id;
}

// The key of block b of variable var in checkpoint id (the documented layout).
std::string Key(int64_t id, const std::string& var, int64_t b) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "data/%020lld/", static_cast<long long>(id));
  char tail[32];
  std::snprintf(tail, sizeof(tail), "#0000#%010lld", static_cast<long long>(b));
  return buf + var + tail;
}

}  // namespace

TEST_CASE("checkpoint: round trip with several blocks", "[storage]") {
  auto kv = NewInMemoryKvStore();
  const int64_t id = SaveOne(kv.get(), 1.0f, 42);
  CHECK(id == 1);
  CheckpointReader r(kv.get());
  auto info = r.Manifest(id);
  REQUIRE(info.ok());
  CHECK(info->global_step == 42);
  REQUIRE(info->variables.size() == 3);
  const CheckpointVariable* w = info->Find("w");
  REQUIRE(w);
  CHECK(w->dtype == DType::kFloat32);
  CHECK(w->shape == Shape{5, 3});
  CHECK(w->num_blocks == 3);  // 2 + 2 + 1 rows
  auto all = r.ReadAll(id);
  REQUIRE(all.ok());
  auto wv = (*all)["w"].ToVector<float>();
  for (int i = 0; i < 15; ++i) CHECK(wv[i] == 1.0f + i);
  CHECK((*all)["w/Adam/m"].ToVector<double>() == std::vector<double>{1.0, 2.0});
  CHECK((*all)["step"].scalar_as<int64_t>() == 42);
  CHECK((*all)["step"].rank() == 0);
  CHECK(r.Verify(id).ok());
  CHECK(*r.LatestCommitted() == id);
}

TEST_CASE("checkpoint: ids are monotonic and an uncommitted one is invisible", "[storage]") {
  auto kv = NewInMemoryKvStore();
  SaveOne(kv.get(), 0, 1);
  auto w = CheckpointWriter::Begin(kv.get(), 2);
  REQUIRE(w.ok());
  CHECK((*w)->id() == 2);
  REQUIRE((*w)->Add("w", Tensor::FromVector<float>({9, 9})).ok());
  // Never committed: readers do not see it, and the next id skips it.
  CheckpointReader r(kv.get());
  CHECK(*r.List() == std::vector<int64_t>{1});
  CHECK(*r.LatestCommitted() == 1);
  CHECK(r.Manifest(2).status().code() == Code::kNotFound);
  CHECK(SaveOne(kv.get(), 0, 3) == 3);
}

TEST_CASE("checkpoint: a corrupt block is named and the reader falls back", "[storage]") {
  auto kv = NewInMemoryKvStore();
  SaveOne(kv.get(), 0, 10);
  const int64_t id = SaveOne(kv.get(), 100, 20);
  std::string block = *kv->Get(Key(id, "w", 1));
  block[6] ^= 0x40;
  REQUIRE(kv->Put(Key(id, "w", 1), block).ok());
  CheckpointReader r(kv.get());
  Status s = r.Verify(id);
  CHECK(s.code() == Code::kDataLoss);
  CHECK(Contains(s.message(), "checkpoint 2"));
  CHECK(Contains(s.message(), "variable 'w'"));
  CHECK(Contains(s.message(), "block 1"));
  CHECK(Contains(s.message(), "checksum"));
  std::vector<Status> skipped;
  auto ok = r.LatestReadable(-1, &skipped);
  REQUIRE(ok.ok());
  CHECK(*ok == 1);
  REQUIRE(skipped.size() == 1);
  CHECK(Contains(skipped[0].message(), "block 1"));
}

TEST_CASE("checkpoint: a missing block is named", "[storage]") {
  auto kv = NewInMemoryKvStore();
  const int64_t id = SaveOne(kv.get(), 0, 10);
  REQUIRE(kv->Delete(Key(id, "w/Adam/m", 0)).ok());
  Status s = CheckpointReader(kv.get()).Verify(id);
  CHECK(s.code() == Code::kDataLoss);
  CHECK(Contains(s.message(), "variable 'w/Adam/m'"));
  CHECK(Contains(s.message(), "block 0"));
  CHECK(Contains(s.message(), "missing"));
}

TEST_CASE("checkpoint: a truncated or garbage manifest is refused, previous one used", "[storage]") {
  auto kv = NewInMemoryKvStore();
  SaveOne(kv.get(), 0, 10);
  const int64_t id = SaveOne(kv.get(), 0, 20);
  char key[64];
  std::snprintf(key, sizeof(key), "manifest/%020lld", static_cast<long long>(id));
  const std::string m = *kv->Get(key);
  CheckpointReader r(kv.get());
  for (const std::string& bad : {m.substr(0, m.size() / 2), std::string("garbage"), std::string()}) {
    REQUIRE(kv->Put(key, bad).ok());
    auto info = r.Manifest(id);
    CHECK(info.status().code() == Code::kDataLoss);
    CHECK(Contains(info.status().message(), "checkpoint 2"));
    CHECK(Contains(info.status().message(), "manifest"));
    CHECK(*r.LatestCommitted() == 1);
    CHECK(*r.LatestReadable() == 1);
  }
}

// Re-signs a manifest body the way the writer does (crc32, 8 hex digits).
std::string Signed(const std::string& body) {
  char crc[16];
  std::snprintf(crc, sizeof(crc), "%08lx",
                crc32(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(body.data()), body.size()));
  return body + "crc " + crc + "\n";
}

TEST_CASE("checkpoint: a well-signed manifest with inconsistent blocks is refused", "[storage]") {
  auto kv = NewInMemoryKvStore();
  const int64_t id = SaveOne(kv.get(), 0, 10);
  char key[64];
  std::snprintf(key, sizeof(key), "manifest/%020lld", static_cast<long long>(id));
  const std::string m = *kv->Get(key);
  const std::string body = m.substr(0, m.rfind("crc "));
  // w is 5x3 float in blocks of 2 rows: "2 3" is rows_per_block, num_blocks;
  // "-1" says every row is stored (not an increment).
  const std::string entry = "var w float32 0 2 3 -1 2 5 3\n";
  REQUIRE(body.find(entry) != std::string::npos);
  CheckpointReader r(kv.get());
  REQUIRE(kv->Put(key, Signed(body)).ok());
  REQUIRE(r.Manifest(id).ok());  // re-signing alone changes nothing
  for (const std::string& bad : {std::string("var w float32 0 2 1 -1 2 5 3\n"),    // rows 2-4 would go unread
                                 std::string("var w float32 0 0 3 -1 2 5 3\n"),    // zero rows per block
                                 std::string("var w float32 0 2 3 -1 2 5 4611686018427387904\n"),
                                 std::string("var w float32 0 2 3 9 2 5 3\n"),     // more stored rows than rows
                                 std::string("var w float32 0 2 1 2 2 5 3\n")}) {  // changed rows, no parent
    std::string changed = body;
    changed.replace(changed.find(entry), entry.size(), bad);
    REQUIRE(kv->Put(key, Signed(changed)).ok());
    auto info = r.Manifest(id);
    CHECK(info.status().code() == Code::kDataLoss);
    CHECK(Contains(info.status().message(), "variable 'w'"));
  }
}

TEST_CASE("checkpoint: stray keys that look like ids are ignored", "[storage]") {
  auto kv = NewInMemoryKvStore();
  REQUIRE(kv->Put("manifest/99999999999999999999", "x").ok());
  REQUIRE(kv->Put("pending/99999999999999999999", "x").ok());
  const int64_t id = SaveOne(kv.get(), 0, 10);
  CHECK(id == 1);
  CheckpointReader r(kv.get());
  CHECK(*r.List() == std::vector<int64_t>{1});
}

TEST_CASE("checkpoint: retention keeps the newest N and drops their blocks", "[storage]") {
  auto kv = NewInMemoryKvStore();
  for (int i = 0; i < 5; ++i) SaveOne(kv.get(), i, i);
  auto gone = RetainCheckpoints(kv.get(), 2);
  REQUIRE(gone.ok());
  CHECK(*gone == std::vector<int64_t>{1, 2, 3});
  CheckpointReader r(kv.get());
  CHECK(*r.List() == std::vector<int64_t>{4, 5});
  CHECK(kv->Keys("data/00000000000000000001/")->empty());
  CHECK(r.Verify(4).ok());
  // Ids keep growing after deletions.
  CHECK(SaveOne(kv.get(), 0, 9) == 6);
}

TEST_CASE("checkpoint: bad names and values are refused", "[storage]") {
  auto kv = NewInMemoryKvStore();
  auto w = CheckpointWriter::Begin(kv.get(), 0);
  REQUIRE(w.ok());
  CHECK(!(*w)->Add("a b", Tensor::Scalar<float>(1)).ok());
  CHECK(!(*w)->Add("x", Tensor()).ok());
  REQUIRE((*w)->Add("x", Tensor::Scalar<float>(1)).ok());
  CHECK(Contains((*w)->Add("x", Tensor::Scalar<float>(1)).message(), "added twice"));
}

TEST_CASE("checkpoint: works over rocksdb", "[storage]") {
  sf::testing::TempDir dir("sf_ckpt");
  int64_t id;
  {
    auto kv = OpenRocksDb(dir / "db");
    REQUIRE(kv.ok());
    id = SaveOne(kv->get(), 3, 7);
  }
  auto kv = OpenRocksDb(dir / "db");
  REQUIRE(kv.ok());
  CheckpointReader r(kv->get());
  CHECK(*r.LatestCommitted() == id);
  CHECK(r.Verify(id).ok());
  CHECK((*r.ReadAll(id))["w"].ToVector<float>()[14] == 17.0f);
}

TEST_CASE("checkpoint: big variables (bulk-written) round trip over rocksdb", "[storage]") {
  sf::testing::TempDir dir("sf_ckpt");
  // 16500 x 1024 float32 (67.6 MB: bulk-written, by two writers) with
  // distinct values, in 1 MiB blocks, plus a small variable written the
  // ordinary way.
  const int64_t rows = 16500, cols = 1024;
  std::vector<float> vals(rows * cols);
  for (size_t i = 0; i < vals.size(); ++i) vals[i] = static_cast<float>(i);
  int64_t id;
  {
    auto kv = OpenRocksDb(dir / "db");
    REQUIRE(kv.ok());
    auto w = CheckpointWriter::Begin(kv->get(), 5, /*block_bytes=*/1 << 20);
    REQUIRE(w.ok());
    REQUIRE((*w)->Add("big", Tensor::FromVector<float>(vals, {rows, cols})).ok());
    REQUIRE((*w)->Add("small", Tensor::FromVector<float>({1, 2, 3}, {3})).ok());
    auto c = (*w)->Commit();
    REQUIRE(c.ok());
    id = *c;
  }
  auto kv = OpenRocksDb(dir / "db");
  REQUIRE(kv.ok());
  CheckpointReader r(kv->get());
  auto info = r.Manifest(id);
  REQUIRE(info.ok());
  // 256 rows of 4 KiB per 1 MiB block.
  CHECK(info->Find("big")->num_blocks == (rows + 255) / 256);
  auto all = r.ReadAll(id);
  REQUIRE(all.ok());
  CHECK((*all)["big"].ToVector<float>() == vals);
  CHECK((*all)["small"].ToVector<float>() == std::vector<float>{1, 2, 3});
  // Two table files (one per writer), no leftovers.
  int ssts = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir / "db")) {
    ssts += e.path().extension() == ".sst";
    CHECK(e.path().filename().string().rfind("sf_bulk_", 0) != 0);
  }
  CHECK(ssts >= 2);
  // A flipped byte in a bulk-written block is caught, by name.
  std::string block = *(*kv)->Get(Key(id, "big", 3));
  block[100] ^= 1;
  REQUIRE((*kv)->Put(Key(id, "big", 3), block).ok());
  Status s = r.Verify(id);
  CHECK(s.code() == Code::kDataLoss);
  CHECK(Contains(s.message(), "variable 'big'"));
  CHECK(Contains(s.message(), "block 3"));
  // Deleting the checkpoint gives the bulk-written table file's space back
  // at once (it sits in RocksDB's bottom level, which compactions of the
  // deletions might never reach).
  auto sst_bytes = [&] {
    uintmax_t n = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir / "db"))
      if (e.path().extension() == ".sst") n += e.file_size();
    return n;
  };
  const uintmax_t before = sst_bytes();
  CHECK(before >= vals.size() * sizeof(float));
  REQUIRE(DeleteCheckpoint(kv->get(), id).ok());
  CHECK(sst_bytes() + vals.size() * sizeof(float) <= before);
  CHECK((*kv)->Keys("data/")->empty());
  CHECK(r.LatestCommitted().status().code() == Code::kNotFound);
}

TEST_CASE("checkpoint: a chain of bulk-written increments over rocksdb composes in place", "[storage][incremental]") {
  sf::testing::TempDir dir("sf_ckpt");
  // A 67.6 MB base (two writers, read back by two threads), two increments
  // whose changed rows are bulk-written for two variables (one ingestion of
  // several files per checkpoint), the last one small.
  const int64_t rows = 16500, cols = 1024;
  Tensor t(DType::kFloat32, {rows, cols});
  for (int64_t i = 0; i < t.num_elements(); ++i) t.data<float>()[i] = static_cast<float>(i);
  Tensor slot = Tensor::Zeros(DType::kFloat32, {rows, 8});
  std::map<int64_t, std::pair<std::vector<float>, std::vector<float>>> expected;
  auto kv = OpenRocksDb(dir / "db");
  REQUIRE(kv.ok());
  auto save = [&](int64_t parent, const std::vector<int64_t>& changed) {
    auto w = CheckpointWriter::Begin(kv->get(), parent + 1, /*block_bytes=*/1 << 20);
    REQUIRE(w.ok());
    if (parent < 0) {
      REQUIRE((*w)->Add("t", t).ok());
      REQUIRE((*w)->Add("t/slot", slot).ok());
    } else {
      REQUIRE((*w)->SetParent(parent).ok());
      REQUIRE((*w)->AddRows("t", t, changed).ok());
      REQUIRE((*w)->AddRows("t/slot", slot, changed).ok());
    }
    auto id = (*w)->Commit();
    REQUIRE(id.ok());
    expected[*id] = {t.ToVector<float>(), slot.ToVector<float>()};
    return *id;
  };
  auto change = [&](const std::vector<int64_t>& changed, float v) {
    for (int64_t r : changed) {
      for (int64_t j = 0; j < cols; ++j) t.data<float>()[r * cols + j] = v + j;
      for (int64_t j = 0; j < 8; ++j) slot.data<float>()[r * 8 + j] = v - j;
    }
  };
  const int64_t base = save(-1, {});
  std::vector<int64_t> many;  // 1200 rows: 4.9 MB, bulk-written
  for (int64_t r = 3; r < rows && many.size() < 1200; r += 13) many.push_back(r);
  change(many, -1);
  const int64_t inc1 = save(base, many);
  change({0, 16, 9000, rows - 1}, -7);
  const int64_t inc2 = save(inc1, {0, 16, 9000, rows - 1});
  CheckpointReader r(kv->get());
  for (int64_t id : {base, inc1, inc2}) {
    INFO("checkpoint " << id);
    auto all = r.ReadAll(id);
    REQUIRE(all.ok());
    CHECK((*all)["t"].ToVector<float>() == expected[id].first);
    CHECK((*all)["t/slot"].ToVector<float>() == expected[id].second);
  }
  // A flipped byte in a block of the base's upper half (the second reader
  // thread's) fails every checkpoint of the chain, naming the block.
  const int64_t blocks = r.Manifest(base)->Find("t")->num_blocks;
  const std::string key = Key(base, "t", blocks - 2);
  std::string block = *(*kv)->Get(key);
  block[10] ^= 1;
  REQUIRE((*kv)->Put(key, block).ok());
  auto bad = r.ReadAll(inc2);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().code() == Code::kDataLoss);
  CHECK(bad.status().message().find("block " + std::to_string(blocks - 2)) != std::string::npos);
}

TEST_CASE("checkpoint: an abandoned writer's bulk-written variables stay invisible", "[storage]") {
  sf::testing::TempDir dir("sf_ckpt");
  auto kv = OpenRocksDb(dir / "db");
  REQUIRE(kv.ok());
  {
    auto w = CheckpointWriter::Begin(kv->get(), 1);
    REQUIRE(w.ok());
    REQUIRE((*w)->Add("big", Tensor::Zeros(DType::kFloat32, {2048, 1024})).ok());  // 8 MiB: bulk
    // Dropped without Commit: its table file is never ingested.
  }
  auto keys = (*kv)->Keys("data/");
  REQUIRE(keys.ok());
  CHECK(keys->empty());
  for (const auto& e : std::filesystem::directory_iterator(dir / "db"))
    CHECK(e.path().filename().string().rfind("sf_bulk_", 0) != 0);
  CheckpointReader r(kv->get());
  CHECK(r.LatestCommitted().status().code() == Code::kNotFound);
}
