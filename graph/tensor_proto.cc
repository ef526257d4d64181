#include "graph/tensor_proto.h"

#include <cstring>
#include <limits>
#include <string>

namespace sf {

// Tensor bytes are stored little-endian; a big-endian port would swap here.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "tensor_proto assumes a little-endian host");

namespace {
// Cap'n Proto lists (and so Data blobs) hold fewer than 2^29 elements.
constexpr size_t kMaxDataBytes = (size_t{1} << 29) - 1;
}  // namespace

proto::DType DTypeToProto(DType t) {
  switch (t) {
    case DType::kFloat32: return proto::DType::FLOAT32;
    case DType::kFloat64: return proto::DType::FLOAT64;
    case DType::kInt32: return proto::DType::INT32;
    case DType::kInt64: return proto::DType::INT64;
    case DType::kBool: return proto::DType::BOOL;
    case DType::kBFloat16: return proto::DType::BFLOAT16;
    case DType::kFloat16: return proto::DType::FLOAT16;
    case DType::kResource: return proto::DType::RESOURCE;
    case DType::kInt8: return proto::DType::INT8;
    case DType::kInt16: return proto::DType::INT16;
    case DType::kUInt8: return proto::DType::UINT8;
    case DType::kInvalid: break;
  }
  return proto::DType::INVALID;
}

Result<DType> DTypeFromProto(proto::DType t) {
  switch (t) {
    case proto::DType::INVALID: return DType::kInvalid;
    case proto::DType::FLOAT32: return DType::kFloat32;
    case proto::DType::FLOAT64: return DType::kFloat64;
    case proto::DType::INT32: return DType::kInt32;
    case proto::DType::INT64: return DType::kInt64;
    case proto::DType::BOOL: return DType::kBool;
    case proto::DType::BFLOAT16: return DType::kBFloat16;
    case proto::DType::FLOAT16: return DType::kFloat16;
    case proto::DType::RESOURCE: return DType::kResource;
    case proto::DType::INT8: return DType::kInt8;
    case proto::DType::INT16: return DType::kInt16;
    case proto::DType::UINT8: return DType::kUInt8;
  }
  return DataLoss("unknown dtype enumerant " + std::to_string(static_cast<int>(t)));
}

void PartialShapeToProto(const PartialShape& s, proto::PartialShape::Builder b) {
  b.setUnknownRank(!s.rank_known());
  if (!s.rank_known()) return;
  auto dims = b.initDims(s.rank());
  for (int i = 0; i < s.rank(); ++i) dims.set(i, s.dim(i));
}

Result<PartialShape> PartialShapeFromProto(proto::PartialShape::Reader r) {
  if (r.getUnknownRank()) return PartialShape();
  Shape dims;
  for (int64_t d : r.getDims()) {
    if (d < -1) return DataLoss("shape dimension " + std::to_string(d) + " is below -1");
    dims.push_back(d);
  }
  return PartialShape(std::move(dims));
}

Status TensorToProto(const Tensor& t, proto::Tensor::Builder b) {
  b.setDtype(DTypeToProto(t.dtype()));
  if (!t.valid()) return Status::OK();
  auto shape = b.initShape(t.rank());
  for (int i = 0; i < t.rank(); ++i) shape.set(i, t.dim(i));
  if (t.bytes() > kMaxDataBytes) {
    return InvalidArgument(std::string("tensor ") + DTypeName(t.dtype()) + ShapeString(t.shape()) + " has " +
                           std::to_string(t.bytes()) +
                           " bytes; at most 536870911 fit in one Cap'n Proto Data blob");
  }
  auto data = b.initData(t.bytes());
  if (t.bytes() > 0) std::memcpy(data.begin(), t.raw_data(), t.bytes());
  return Status::OK();
}

Result<Tensor> TensorFromProto(proto::Tensor::Reader r) {
  SF_ASSIGN_OR_RETURN(DType dtype, DTypeFromProto(r.getDtype()));
  auto data = r.getData();
  if (dtype == DType::kInvalid) {
    if (r.getShape().size() != 0 || data.size() != 0)
      return DataLoss("a tensor of dtype invalid carries a shape or data");
    return Tensor();
  }
  Shape shape;
  int64_t n = 1;
  for (int64_t d : r.getShape()) {
    if (d < 0) return DataLoss("tensor dimension " + std::to_string(d) + " is negative");
    if (d > 0 && n > std::numeric_limits<int64_t>::max() / d)
      return DataLoss("tensor element count overflows int64");
    n *= d;
    shape.push_back(d);
  }
  const size_t elem = DTypeSize(dtype);
  if (static_cast<uint64_t>(n) > kMaxDataBytes || n * elem != data.size()) {
    return DataLoss("tensor " + std::string(DTypeName(dtype)) + ShapeString(shape) + " needs " +
                    std::to_string(n * static_cast<int64_t>(elem)) + " bytes but holds " +
                    std::to_string(data.size()));
  }
  Tensor t(dtype, shape);
  if (data.size() > 0) std::memcpy(t.raw_data(), data.begin(), data.size());
  if (dtype == DType::kBool) {
    // Any nonzero byte is true; normalise so comparisons of bools stay exact.
    auto* p = static_cast<uint8_t*>(t.raw_data());
    for (int64_t i = 0; i < n; ++i) p[i] = p[i] != 0;
  }
  return t;
}

}  // namespace sf
