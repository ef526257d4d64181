#include <catch2/catch.hpp>

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
