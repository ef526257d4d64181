#include "shardflow/npy.h"

#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <vector>

namespace sf {

// .npy data are written and read as '<' (little-endian) by plain copies.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "npy.cc assumes a little-endian host");

namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;
// NumPy pads the header so the data start on a 64-byte boundary.
constexpr size_t kAlign = 64;

// One value of the header's Python dict literal.
struct HeaderValue {
  enum Kind { kString, kBool, kTuple } kind = kString;
  std::string str;
  bool boolean = false;
  std::vector<int64_t> ints;
};

// Parses NumPy's header, a Python dict literal such as
// {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }.
class HeaderParser {
 public:
  explicit HeaderParser(const std::string& s) : s_(s) {}

  Status Parse(std::map<std::string, HeaderValue>* out) {
    Skip();
    if (!Eat('{')) return Bad("does not start with '{'");
    for (;;) {
      Skip();
      if (Eat('}')) break;
      std::string key;
      SF_RETURN_IF_ERROR(String(&key));
      Skip();
      if (!Eat(':')) return Bad("expected ':' after key '" + key + "'");
      Skip();
      HeaderValue v;
      SF_RETURN_IF_ERROR(Value(key, &v));
      (*out)[key] = std::move(v);
      Skip();
      if (Eat(',')) continue;
      Skip();
      if (Eat('}')) break;
      return Bad("expected ',' or '}' after the value of '" + key + "'");
    }
    Skip();
    if (pos_ != s_.size()) return Bad("unexpected text after '}'");
    return Status::OK();
  }

 private:
  Status Bad(const std::string& why) const {
    return DataLoss("malformed header (" + why + " at offset " + std::to_string(pos_) + "): " + s_);
  }
  void Skip() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  bool Eat(char c) {
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool EatWord(const char* w) {
    const size_t n = std::strlen(w);
    if (s_.compare(pos_, n, w) != 0) return false;
    pos_ += n;
    return true;
  }
  Status String(std::string* out) {
    if (pos_ >= s_.size() || (s_[pos_] != '\'' && s_[pos_] != '"')) return Bad("expected a string");
    const char q = s_[pos_++];
    const size_t end = s_.find(q, pos_);
    if (end == std::string::npos) return Bad("unterminated string");
    *out = s_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return Status::OK();
  }
  Status Int(int64_t* out) {
    const size_t start = pos_;
    while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) ++pos_;
    if (pos_ == start) return Bad("expected a non-negative integer");
    errno = 0;
    const unsigned long long v = std::strtoull(s_.c_str() + start, nullptr, 10);
    if (errno == ERANGE || v > static_cast<unsigned long long>(std::numeric_limits<int64_t>::max()))
      return Bad("dimension too large");
    *out = static_cast<int64_t>(v);
    Eat('L');  // Python 2 wrote longs as 3L.
    return Status::OK();
  }
  Status Value(const std::string& key, HeaderValue* v) {
    if (pos_ < s_.size() && (s_[pos_] == '\'' || s_[pos_] == '"')) {
      v->kind = HeaderValue::kString;
      return String(&v->str);
    }
    if (EatWord("True") || EatWord("False")) {
      v->kind = HeaderValue::kBool;
      v->boolean = s_.compare(pos_ - 4, 4, "True") == 0;
      return Status::OK();
    }
    if (Eat('(')) {
      v->kind = HeaderValue::kTuple;
      for (;;) {
        Skip();
        if (Eat(')')) return Status::OK();
        int64_t d;
        SF_RETURN_IF_ERROR(Int(&d));
        v->ints.push_back(d);
        Skip();
        if (Eat(',')) continue;
        Skip();
        if (Eat(')')) return Status::OK();
        return Bad("expected ',' or ')' in the tuple of '" + key + "'");
      }
    }
    if (pos_ < s_.size() && s_[pos_] == '[' && key == "descr")
      return InvalidArgument("structured arrays are not supported (descr " + s_.substr(pos_) + ")");
    return Bad("unsupported value for '" + key + "'");
  }

  const std::string& s_;
  size_t pos_ = 0;
};

Result<DType> DTypeFromDescr(const std::string& d) {
  if (d.size() >= 2 && d[0] == '>' && d != ">b1" && d != ">i1" && d != ">u1")
    return InvalidArgument("big-endian data ('" + d + "') are not supported; save with "
                           "arr.astype(arr.dtype.newbyteorder('<'))");
  const std::string body = (d.size() >= 1 && (d[0] == '<' || d[0] == '|' || d[0] == '=' || d[0] == '>'))
                               ? d.substr(1)
                               : d;
  if (body == "f4") return DType::kFloat32;
  if (body == "f8") return DType::kFloat64;
  if (body == "i4") return DType::kInt32;
  if (body == "i8") return DType::kInt64;
  if (body == "b1" || body == "?") return DType::kBool;
  if (body == "i1") return DType::kInt8;
  if (body == "i2") return DType::kInt16;
  if (body == "u1") return DType::kUInt8;
  return InvalidArgument("unsupported dtype '" + d +
                         "' (supported: '<f4', '<f8', '<i4', '<i8', '<i2', '|i1', '|u1', '|b1')");
}

Result<std::string> DescrOf(DType t) {
  switch (t) {
    case DType::kFloat32: return std::string("<f4");
    case DType::kFloat64: return std::string("<f8");
    case DType::kInt32: return std::string("<i4");
    case DType::kInt64: return std::string("<i8");
    case DType::kBool: return std::string("|b1");
    case DType::kInt8: return std::string("|i1");
    case DType::kInt16: return std::string("<i2");
    case DType::kUInt8: return std::string("|u1");
    default: break;
  }
  return InvalidArgument(std::string("a ") + DTypeName(t) +
                         " tensor cannot be stored in .npy (supported: float32, float64, int32, "
                         "int64, int16, int8, uint8, bool)");
}

uint32_t ReadLE(const std::string& b, size_t at, int bytes) {
  uint32_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(b[at + i]);
  return v;
}

Result<Tensor> Parse(const std::string& b) {
  if (b.size() < kMagicLen + 2 || b.compare(0, kMagicLen, kMagic, kMagicLen) != 0)
    return DataLoss("not a .npy file (bad magic; expected \\x93NUMPY)");
  const int major = static_cast<uint8_t>(b[6]);
  const int minor = static_cast<uint8_t>(b[7]);
  if (major < 1 || major > 3) {
    return InvalidArgument("unsupported .npy format version " + std::to_string(major) + "." +
                           std::to_string(minor) + " (supported: 1.0, 2.0, 3.0)");
  }
  const int len_bytes = major == 1 ? 2 : 4;
  const size_t header_start = 8 + len_bytes;
  if (b.size() < header_start) return DataLoss("truncated header");
  const size_t header_len = ReadLE(b, 8, len_bytes);
  if (b.size() < header_start + header_len) {
    return DataLoss("truncated header (" + std::to_string(header_len) + " bytes promised, " +
                    std::to_string(b.size() - header_start) + " present)");
  }
  std::map<std::string, HeaderValue> h;
  SF_RETURN_IF_ERROR(HeaderParser(b.substr(header_start, header_len)).Parse(&h));
  auto descr = h.find("descr");
  auto fortran = h.find("fortran_order");
  auto shape_v = h.find("shape");
  if (descr == h.end() || descr->second.kind != HeaderValue::kString)
    return DataLoss("header has no string 'descr'");
  if (fortran == h.end() || fortran->second.kind != HeaderValue::kBool)
    return DataLoss("header has no boolean 'fortran_order'");
  if (shape_v == h.end() || shape_v->second.kind != HeaderValue::kTuple)
    return DataLoss("header has no tuple 'shape'");
  SF_ASSIGN_OR_RETURN(DType dtype, DTypeFromDescr(descr->second.str));
  Shape shape = shape_v->second.ints;
  if (fortran->second.boolean && shape.size() > 1) {
    return InvalidArgument("Fortran-order (column-major) arrays are not supported; save with "
                           "np.save(path, np.ascontiguousarray(arr))");
  }
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d > 0 && n > std::numeric_limits<int64_t>::max() / d) return DataLoss("shape overflows int64");
    n *= d;
  }
  const size_t elem = DTypeSize(dtype);
  const size_t data_start = header_start + header_len;
  const size_t present = b.size() - data_start;
  if (static_cast<uint64_t>(n) > present / elem + 1 || n * elem > present) {
    return DataLoss("truncated data: " + std::string(DTypeName(dtype)) + ShapeString(shape) +
                    " needs " + std::to_string(static_cast<uint64_t>(n) * elem) + " bytes, " +
                    std::to_string(present) + " present");
  }
  if (n * elem < present) {
    return DataLoss(std::to_string(present - n * elem) + " unexpected bytes after the " +
                    DTypeName(dtype) + ShapeString(shape) + " data");
  }
  Tensor t(dtype, shape);
  if (present > 0) std::memcpy(t.raw_data(), b.data() + data_start, present);
  if (dtype == DType::kBool) {
    auto* p = static_cast<uint8_t*>(t.raw_data());
    for (int64_t i = 0; i < n; ++i) p[i] = p[i] != 0;
  }
  return t;
}

}  // namespace

Result<std::string> NpyBytes(const Tensor& t) {
  SF_ASSIGN_OR_RETURN(std::string descr, DescrOf(t.dtype()));
  std::string shape = "(";
  for (int i = 0; i < t.rank(); ++i) shape += (i ? ", " : "") + std::to_string(t.dim(i));
  if (t.rank() == 1) shape += ",";
  shape += ")";
  std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  // Version 1.0 has a 2-byte header length; larger headers need 2.0.
  int major = 1;
  size_t prefix = kMagicLen + 2 + 2;
  if (header.size() + 1 + prefix + kAlign > 65535) {
    major = 2;
    prefix = kMagicLen + 2 + 4;
  }
  const size_t total = prefix + header.size() + 1;
  header.append((kAlign - total % kAlign) % kAlign, ' ');
  header += '\n';
  std::string out(kMagic, kMagicLen);
  out += static_cast<char>(major);
  out += '\0';
  const uint32_t len = static_cast<uint32_t>(header.size());
  for (int i = 0; i < (major == 1 ? 2 : 4); ++i) out += static_cast<char>((len >> (8 * i)) & 0xff);
  out += header;
  out.append(static_cast<const char*>(t.raw_data()), t.bytes());
  return out;
}

Result<Tensor> ParseNpy(const std::string& bytes, const std::string& source) {
  auto r = Parse(bytes);
  if (!r.ok()) return r.status().WithPrefix(source);
  return r;
}

Result<Tensor> ReadNpy(const std::string& path) {
  const std::string source = "npy file '" + path + "'";
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return InvalidArgument(source + " is a directory");
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    const int err = errno;
    if (err == ENOENT) return NotFound(source + " does not exist");
    return InvalidArgument("cannot open " + source + ": " + std::strerror(err));
  }
  std::ostringstream contents;
  contents << f.rdbuf();
  if (f.bad()) return DataLoss("reading " + source + " failed");
  return ParseNpy(contents.str(), source);
}

Status WriteNpy(const std::string& path, const Tensor& t) {
  auto bytes = NpyBytes(t);
  if (!bytes.ok()) return bytes.status().WithPrefix("writing npy file '" + path + "'");
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f)
    return Status(Code::kUnavailable, "cannot write npy file '" + path + "': " + std::strerror(errno));
  f.write(bytes->data(), static_cast<std::streamsize>(bytes->size()));
  f.close();
  if (!f)
    return Status(Code::kUnavailable, "writing npy file '" + path + "' failed: " + std::strerror(errno));
  return Status::OK();
}

}  // namespace sf
