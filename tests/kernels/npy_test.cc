#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "tests/support/temp_dir.h"
#include "shardflow/npy.h"

using namespace sf;
using sf::testing::TempDir;
using sf::testing::WriteFile;

namespace {



// A .npy file as NumPy writes it: version 1.0 header padded to 64 bytes.
std::string NpyV1(const std::string& dict, const std::string& data) {
  std::string header = dict;
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string out = std::string("\x93NUMPY", 6) + '\x01' + '\x00';
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  return out + header + data;
}

template <typename T>
std::string Raw(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

bool ErrorMentions(const Status& s, const std::string& text) {
  return !s.ok() && s.message().find(text) != std::string::npos;
}

}  // namespace

TEST_CASE("npy round-trips every supported dtype", "[npy]") {
  TempDir tmp;
  const std::string dir = tmp.path;
  std::vector<Tensor> ts = {
      Tensor::FromVector<float>({1.5f, -2, 3, 4, 5, 6}, {2, 3}),
      Tensor::Scalar<double>(3.25),
      Tensor::FromVector<int32_t>({7, -8, 9}),
      Tensor::FromVector<int64_t>({int64_t{1} << 40, -1}, {2, 1}),
      Tensor::FromBools({true, false, true, true}, {2, 2}),
      Tensor::Zeros(DType::kFloat32, {0, 3}),
      Tensor::FromVector<int8_t>({-128, 0, 127}),
      Tensor::FromVector<int16_t>({-30000, 1, 30000}, {3, 1}),
      Tensor::FromVector<uint8_t>({0, 7, 255, 9}, {2, 2}),
  };
  for (size_t i = 0; i < ts.size(); ++i) {
    const std::string path = dir + "/t" + std::to_string(i) + ".npy";
    REQUIRE(WriteNpy(path, ts[i]).ok());
    auto r = ReadNpy(path);
    REQUIRE(r.ok());
    CHECK(r->dtype() == ts[i].dtype());
    CHECK(r->shape() == ts[i].shape());
    CHECK(std::memcmp(r->raw_data(), ts[i].raw_data(), ts[i].bytes()) == 0);
  }
}

TEST_CASE("npy header is NumPy's: v1.0, 64-byte aligned, shape tuple", "[npy]") {
  auto b = NpyBytes(Tensor::FromVector<float>({1, 2, 3}));
  REQUIRE(b.ok());
  CHECK(b->compare(0, 8, std::string("\x93NUMPY\x01\x00", 8)) == 0);
  CHECK((b->size() - 12) % 64 == 0);
  CHECK(b->find("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }") == 10);
  CHECK((*b)[b->size() - 13] == '\n');
  auto s = NpyBytes(Tensor::Scalar<int64_t>(5));
  REQUIRE(s.ok());
  CHECK(s->find("'descr': '<i8'") != std::string::npos);
  CHECK(s->find("'shape': ()") != std::string::npos);
  auto m = NpyBytes(Tensor::FromBools({true, false}, {1, 2}));
  REQUIRE(m.ok());
  CHECK(m->find("'descr': '|b1'") != std::string::npos);
  CHECK(m->find("'shape': (1, 2)") != std::string::npos);
}

TEST_CASE("npy reads hand-written v1.0 and v2.0 files", "[npy]") {
  auto t = ParseNpy(NpyV1("{'descr': '<i4', 'fortran_order': False, 'shape': (2, 2), }",
                          Raw<int32_t>({1, 2, 3, 4})));
  REQUIRE(t.ok());
  CHECK(t->dtype() == DType::kInt32);
  CHECK(t->shape() == Shape{2, 2});
  CHECK(t->ToVector<int32_t>() == std::vector<int32_t>{1, 2, 3, 4});

  // Version 2.0: 4-byte header length; keys in another order, Python 2 longs.
  std::string header = "{'shape': (3L,), 'fortran_order': False, 'descr': '<f8'}";
  while ((12 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string v2 = std::string("\x93NUMPY\x02\x00", 8);
  for (int i = 0; i < 4; ++i) v2 += static_cast<char>((header.size() >> (8 * i)) & 0xff);
  v2 += header + Raw<double>({0.5, 1.5, -2});
  auto d = ParseNpy(v2);
  REQUIRE(d.ok());
  CHECK(d->dtype() == DType::kFloat64);
  CHECK(d->ToVector<double>() == std::vector<double>{0.5, 1.5, -2});

  // A Fortran-order vector has the same layout as a C-order one.
  auto f1 = ParseNpy(NpyV1("{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }",
                           Raw<float>({1, 2})));
  CHECK(f1.ok());
}

TEST_CASE("npy errors name the file and the problem", "[npy]") {
  TempDir tmp;
  const std::string dir = tmp.path;
  auto read = [&](const std::string& name, const std::string& bytes) {
    WriteFile(dir + "/" + name, bytes);
    return ReadNpy(dir + "/" + name).status();
  };
  Status s = read("magic.npy", "PK\x03\x04 this is a zip");
  CHECK(s.code() == Code::kDataLoss);
  CHECK(ErrorMentions(s, "magic.npy"));
  CHECK(ErrorMentions(s, "bad magic"));

  s = read("u2.npy", NpyV1("{'descr': '<u2', 'fortran_order': False, 'shape': (2,), }", "abcd"));
  CHECK(s.code() == Code::kInvalidArgument);
  CHECK(ErrorMentions(s, "unsupported dtype '<u2'"));

  s = read("be.npy", NpyV1("{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }", "abcd"));
  CHECK(ErrorMentions(s, "big-endian"));

  s = read("fortran.npy",
           NpyV1("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", Raw<float>({1, 2, 3, 4})));
  CHECK(s.code() == Code::kInvalidArgument);
  CHECK(ErrorMentions(s, "Fortran-order"));

  s = read("short.npy",
           NpyV1("{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }", Raw<double>({1, 2})));
  CHECK(s.code() == Code::kDataLoss);
  CHECK(ErrorMentions(s, "short.npy"));
  CHECK(ErrorMentions(s, "truncated data: float64[2,3] needs 48 bytes, 16 present"));

  s = read("long.npy",
           NpyV1("{'descr': '<i4', 'fortran_order': False, 'shape': (1,), }", Raw<int32_t>({1, 2})));
  CHECK(ErrorMentions(s, "4 unexpected bytes"));

  s = read("header.npy", NpyV1("{'descr': '<f4', 'fortran_order': Maybe, 'shape': (1,), }", "abcd"));
  CHECK(s.code() == Code::kDataLoss);
  CHECK(ErrorMentions(s, "malformed header"));

  s = read("noshape.npy", NpyV1("{'descr': '<f4', 'fortran_order': False, }", "abcd"));
  CHECK(ErrorMentions(s, "no tuple 'shape'"));

  std::string cut = NpyV1("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", "");
  s = read("cut.npy", cut.substr(0, 30));
  CHECK(ErrorMentions(s, "truncated header"));

  s = ReadNpy(dir + "/missing.npy").status();
  CHECK(s.code() == Code::kNotFound);
  CHECK(ErrorMentions(s, "missing.npy"));

  s = WriteNpy(dir + "/r.npy", Tensor(DType::kResource, {}));
  CHECK(s.code() == Code::kInvalidArgument);
  CHECK(ErrorMentions(s, "resource"));
  CHECK(WriteNpy(dir + "/no/such/dir/x.npy", Tensor::Scalar<float>(1)).code() == Code::kUnavailable);
}

TEST_CASE("npy files round-trip with NumPy when it is installed", "[npy][numpy]") {
  if (std::system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") != 0) {
    WARN("skipped: /usr/bin/python3 with numpy is not available");
    return;
  }
  TempDir tmp;
  const std::string dir = tmp.path;
  REQUIRE(WriteNpy(dir + "/ours_f32.npy", Tensor::FromVector<float>({1, 2, 3, 4, 5, 6}, {2, 3})).ok());
  REQUIRE(WriteNpy(dir + "/ours_bool.npy", Tensor::FromBools({true, false, true}, {3})).ok());
  REQUIRE(WriteNpy(dir + "/ours_i64.npy", Tensor::Scalar<int64_t>(-7)).ok());
  const std::string script = dir + "/check.py";
  WriteFile(script,
            "import numpy as np, sys\n"
            "d = sys.argv[1]\n"
            "a = np.load(d + '/ours_f32.npy')\n"
            "assert a.dtype == np.float32 and a.shape == (2, 3), (a.dtype, a.shape)\n"
            "assert (a == np.arange(1, 7, dtype=np.float32).reshape(2, 3)).all()\n"
            "b = np.load(d + '/ours_bool.npy')\n"
            "assert b.dtype == np.bool_ and list(b) == [True, False, True]\n"
            "c = np.load(d + '/ours_i64.npy')\n"
            "assert c.dtype == np.int64 and c.shape == () and c == -7\n"
            "np.save(d + '/np_f64.npy', np.linspace(0, 1, 5).reshape(5, 1))\n"
            "np.save(d + '/np_i32.npy', np.array([[1, -2], [3, 4]], dtype=np.int32))\n"
            "np.save(d + '/np_bool.npy', np.array([False, True]))\n"
            "np.save(d + '/np_fortran.npy', np.asfortranarray(np.ones((2, 3), np.float32)))\n"
            "with open(d + '/np_v2.npy', 'wb') as f:\n"
            "    np.lib.format.write_array(f, np.arange(4, dtype=np.int64), version=(2, 0))\n");
  REQUIRE(std::system(("/usr/bin/python3 " + script + " " + dir).c_str()) == 0);

  auto f64 = ReadNpy(dir + "/np_f64.npy");
  REQUIRE(f64.ok());
  CHECK(f64->shape() == Shape{5, 1});
  CHECK(f64->ToVector<double>() == std::vector<double>{0, 0.25, 0.5, 0.75, 1});
  auto i32 = ReadNpy(dir + "/np_i32.npy");
  REQUIRE(i32.ok());
  CHECK(i32->dtype() == DType::kInt32);
  CHECK(i32->ToVector<int32_t>() == std::vector<int32_t>{1, -2, 3, 4});
  auto b = ReadNpy(dir + "/np_bool.npy");
  REQUIRE(b.ok());
  CHECK(b->dtype() == DType::kBool);
  CHECK(b->ToVector<int>() == std::vector<int>{0, 1});
  auto v2 = ReadNpy(dir + "/np_v2.npy");
  REQUIRE(v2.ok());
  CHECK(v2->ToVector<int64_t>() == std::vector<int64_t>{0, 1, 2, 3});
  auto fortran = ReadNpy(dir + "/np_fortran.npy");
  CHECK(fortran.status().code() == Code::kInvalidArgument);
  CHECK(ErrorMentions(fortran.status(), "Fortran-order"));
}
