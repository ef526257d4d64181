#include <catch2/catch.hpp>

#include <filesystem>
#include <map>

#include "storage/kv_store.h"
#include "tests/support/temp_dir.h"

using namespace sf;
using sf::testing::TempDir;

namespace {

void ExerciseStore(KvStore& kv) {
  KvBatch b;
  b.Put("a/1", "one");
  b.Put("a/2", "two");
  b.Put("b/1", "three");
  REQUIRE(kv.Write(b, true).ok());
  auto v = kv.Get("a/2");
  REQUIRE(v.ok());
  CHECK(*v == "two");
  CHECK(kv.Get("zzz").status().code() == Code::kNotFound);
  std::vector<std::string> seen;
  REQUIRE(kv.Scan("a/", [&](const std::string& k, const std::string& val) {
    seen.push_back(k + "=" + val);
    return true;
  }).ok());
  CHECK(seen == std::vector<std::string>{"a/1=one", "a/2=two"});
  REQUIRE(kv.Delete("a/1").ok());
  auto keys = kv.Keys("a/");
  REQUIRE(keys.ok());
  CHECK(*keys == std::vector<std::string>{"a/2"});
  // Binary values (zero bytes) round trip.
  const std::string bin("x\0y", 3);
  REQUIRE(kv.Put("bin", bin).ok());
  CHECK(*kv.Get("bin") == bin);
}

}  // namespace

TEST_CASE("in-memory kv store: put, get, scan, delete", "[storage]") {
  auto kv = NewInMemoryKvStore();
  ExerciseStore(*kv);
}

TEST_CASE("rocksdb kv store: put, get, scan, delete, reopen", "[storage]") {
  TempDir dir("sf_kv");
  {
    auto kv = OpenRocksDb(dir / "db");
    REQUIRE(kv.ok());
    ExerciseStore(**kv);
  }
  auto kv = OpenRocksDb(dir / "db", false);
  REQUIRE(kv.ok());
  CHECK(*(*kv)->Get("a/2") == "two");
}

TEST_CASE("rocksdb kv store: open failure names the path", "[storage]") {
  TempDir dir("sf_kv");
  auto kv = OpenRocksDb(dir / "missing", /*create_if_missing=*/false);
  REQUIRE(!kv.ok());
  CHECK(kv.status().message().find(dir / "missing") != std::string::npos);
}

namespace {

// Bulk-writes a/0..a/9 (value "v<i>") into kv and checks they read back.
void ExerciseBulk(KvStore& kv) {
  auto w = kv.NewBulkWriter();
  REQUIRE(w.ok());
  for (int i = 0; i < 10; ++i) REQUIRE((*w)->Put("a/" + std::to_string(i), "v" + std::to_string(i)).ok());
  // Keys must ascend: a repeat or a smaller key is refused, by name.
  Status bad = (*w)->Put("a/3", "x");
  CHECK(bad.code() == Code::kInvalidArgument);
  CHECK(bad.message().find("'a/3'") != std::string::npos);
  REQUIRE((*w)->Finish().ok());
  CHECK((*w)->Finish().code() == Code::kFailedPrecondition);
  CHECK((*w)->Put("b", "x").code() == Code::kFailedPrecondition);
  auto keys = kv.Keys("a/");
  REQUIRE(keys.ok());
  REQUIRE(keys->size() == 10);
  CHECK(*kv.Get("a/7") == "v7");
  // Binary values and a 5 MiB value round trip.
  auto w2 = kv.NewBulkWriter();
  REQUIRE(w2.ok());
  const std::string big(5 << 20, '\x7f'), bin("x\0y", 3);
  REQUIRE((*w2)->Put("big", big).ok());
  REQUIRE((*w2)->Put("bin", bin).ok());
  REQUIRE((*w2)->Finish().ok());
  CHECK(*kv.Get("big") == big);
  CHECK(*kv.Get("bin") == bin);
  // A writer finished without puts is fine.
  auto w3 = kv.NewBulkWriter();
  REQUIRE(w3.ok());
  CHECK((*w3)->Finish().ok());
}

// The names in dir starting with "sf_bulk_" (bulk files not yet ingested).
int BulkFiles(const std::string& dir) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().filename().string().rfind("sf_bulk_", 0) == 0) ++n;
  return n;
}

}  // namespace

TEST_CASE("in-memory kv store: bulk writer", "[storage]") {
  auto kv = NewInMemoryKvStore();
  ExerciseBulk(*kv);
}

TEST_CASE("rocksdb kv store: bulk writer, durable across reopen", "[storage]") {
  TempDir dir("sf_kv");
  {
    auto kv = OpenRocksDb(dir / "db");
    REQUIRE(kv.ok());
    ExerciseBulk(**kv);
    CHECK(BulkFiles(dir / "db") == 0);
  }
  auto kv = OpenRocksDb(dir / "db", false);
  REQUIRE(kv.ok());
  CHECK(*(*kv)->Get("a/9") == "v9");
  CHECK((*kv)->Get("big")->size() == size_t{5} << 20);
}

TEST_CASE("rocksdb kv store: unfinished bulk writes stay invisible and leave no file", "[storage]") {
  TempDir dir("sf_kv");
  {
    auto kv = OpenRocksDb(dir / "db");
    REQUIRE(kv.ok());
    {
      auto w = (*kv)->NewBulkWriter();
      REQUIRE(w.ok());
      REQUIRE((*w)->Put("gone/1", std::string(1 << 20, 'g')).ok());
      CHECK(BulkFiles(dir / "db") == 1);
    }
    // Abandoned: its file is removed and its keys never appear.
    CHECK(BulkFiles(dir / "db") == 0);
    CHECK((*kv)->Get("gone/1").status().code() == Code::kNotFound);
  }
  // A killed writer's file (simulated) is removed when the store opens.
  sf::testing::WriteFile(dir / "db/sf_bulk_7.sst", "half a table file");
  auto kv = OpenRocksDb(dir / "db", false);
  REQUIRE(kv.ok());
  CHECK(BulkFiles(dir / "db") == 0);
  CHECK((*kv)->Keys("")->empty());
}

namespace {

// DeletePrefix removes exactly the keys under the prefix, also for a prefix
// of 0xff bytes (which has no successor key to end a range at).
void ExerciseDeletePrefix(KvStore& kv) {
  KvBatch b;
  for (const char* k : {"p/1", "p/2", "p", "p0", "o", "\xff", "\xff\x01", "\xfe\xff"}) b.Put(k, "v");
  REQUIRE(kv.Write(b, false).ok());
  REQUIRE(kv.DeletePrefix("p/").ok());
  CHECK(*kv.Keys("") == std::vector<std::string>{"o", "p", "p0", "\xfe\xff", "\xff", "\xff\x01"});
  REQUIRE(kv.DeletePrefix("\xff").ok());
  CHECK(*kv.Keys("") == std::vector<std::string>{"o", "p", "p0", "\xfe\xff"});
  REQUIRE(kv.DeletePrefix("nothing/").ok());
  CHECK(kv.Keys("")->size() == 4);
}

}  // namespace

TEST_CASE("kv stores: delete by prefix", "[storage]") {
  auto mem = NewInMemoryKvStore();
  ExerciseDeletePrefix(*mem);
  TempDir dir("sf_kv");
  auto kv = OpenRocksDb(dir / "db");
  REQUIRE(kv.ok());
  ExerciseDeletePrefix(**kv);
}

namespace {

// FinishBulk: two writers' keys (in separate ranges) become visible together,
// the writers are consumed, and an empty list is fine.
void ExerciseFinishBulk(KvStore& kv) {
  std::vector<std::unique_ptr<KvBulkWriter>> writers;
  for (const char* prefix : {"p/", "q/"}) {
    auto w = kv.NewBulkWriter();
    REQUIRE(w.ok());
    for (int i = 0; i < 3; ++i) REQUIRE((*w)->Put(prefix + std::to_string(i), prefix + std::string("v")).ok());
    writers.push_back(std::move(*w));
  }
  REQUIRE(kv.FinishBulk(&writers).ok());
  CHECK(writers.empty());
  CHECK(*kv.Get("p/2") == "p/v");
  CHECK(*kv.Get("q/0") == "q/v");
  CHECK(kv.FinishBulk(&writers).ok());
}

// ReadValue: the value reaches fn; one scratch serves many reads; a missing
// key is NotFound; fn's error comes back as it is.
void ExerciseReadValue(KvStore& kv) {
  const std::string big(5 << 20, '\x3c');
  REQUIRE(kv.Put("r/big", big).ok());
  REQUIRE(kv.Put("r/small", std::string("s\0t", 3)).ok());
  std::string scratch, got;
  auto copy = [&](std::string_view v) {
    got.assign(v.data(), v.size());
    return Status::OK();
  };
  REQUIRE(kv.ReadValue("r/big", &scratch, copy).ok());
  CHECK(got == big);
  REQUIRE(kv.ReadValue("r/small", &scratch, copy).ok());
  CHECK(got == std::string("s\0t", 3));
  CHECK(kv.ReadValue("r/none", &scratch, copy).code() == Code::kNotFound);
  Status s = kv.ReadValue("r/small", &scratch, [](std::string_view) { return DataLoss("bad block"); });
  CHECK(s.code() == Code::kDataLoss);
  CHECK(s.message() == "bad block");
}

}  // namespace

TEST_CASE("kv stores: bulk writers finished together, values read through a reused buffer", "[storage]") {
  auto mem = NewInMemoryKvStore();
  ExerciseFinishBulk(*mem);
  ExerciseReadValue(*mem);
  TempDir dir("sf_kv");
  {
    auto kv = OpenRocksDb(dir / "db");
    REQUIRE(kv.ok());
    ExerciseFinishBulk(**kv);
    CHECK(BulkFiles(dir / "db") == 0);  // ingested, our names removed
    ExerciseReadValue(**kv);
  }
  auto kv = OpenRocksDb(dir / "db", false);  // durable across reopen
  REQUIRE(kv.ok());
  CHECK(*(*kv)->Get("q/2") == "q/v");
}

namespace {

// Every key ScanSome shows over calls of max_keys each, from the start until
// its cursor comes back to it, with the values it showed.
std::map<std::string, std::string> ScanAround(KvStore& kv, const std::string& prefix, int64_t max_keys) {
  std::map<std::string, std::string> seen;
  std::string cursor;
  int calls = 0;
  do {
    int64_t n = 0;
    REQUIRE(kv.ScanSome(prefix, &cursor, max_keys, [&](const std::string& k, const std::string& v) {
      CHECK(k.compare(0, prefix.size(), prefix) == 0);
      CHECK(seen.count(k) == 0);  // once per round
      seen[k] = v;
      ++n;
    }).ok());
    CHECK(n <= max_keys);
    REQUIRE(++calls < 100);
  } while (!cursor.empty());
  return seen;
}

}  // namespace

TEST_CASE("kv stores: a bounded scan resumes where it stopped and comes round to every key", "[storage]") {
  auto mem = NewInMemoryKvStore();
  for (int i = 0; i < 10; ++i) REQUIRE(mem->Put("r" + std::to_string(i), "v" + std::to_string(i)).ok());
  REQUIRE(mem->Put("s", "other prefix").ok());
  const auto all = ScanAround(*mem, "r", 3);
  CHECK(all.size() == 10);
  CHECK(all.at("r7") == "v7");
  // RocksDB: the table files' keys (a bulk write makes one file per writer),
  // whatever is in the memtable left for after a flush, and an older value
  // in a table file shown as it is there.
  TempDir dir("sf_kv_some");
  auto kv = OpenRocksDb(dir / "db", true, RocksDbUse::kCache);
  REQUIRE(kv.ok());
  for (int w = 0; w < 2; ++w) {
    auto bw = (*kv)->NewBulkWriter();
    REQUIRE(bw.ok());
    for (int i = 0; i < 5; ++i) REQUIRE((*bw)->Put("r" + std::to_string(w) + std::to_string(i), "old").ok());
    REQUIRE((*bw)->Finish().ok());
  }
  REQUIRE((*kv)->Put("r03", "new").ok());        // in the memtable only
  REQUIRE((*kv)->Put("r99", "unflushed").ok());
  const auto files = ScanAround(**kv, "r", 2);
  CHECK(files.size() == 10);
  CHECK(files.count("r99") == 0);
  CHECK(files.at("r03") == "old");
  CHECK(*(*kv)->Get("r03") == "new");
}
