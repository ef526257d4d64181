// Conversion between sf::Tensor / PartialShape / DType and their Cap'n Proto
// forms in proto/tensor.capnp, for any message that carries tensors.
// Thread-safety: free functions over values.
#pragma once

#include "proto/tensor.capnp.h"
#include "shardflow/tensor.h"

namespace sf {

proto::DType DTypeToProto(DType t);
// The dtype, or DataLoss naming the unknown enumerant.
Result<DType> DTypeFromProto(proto::DType t);

void PartialShapeToProto(const PartialShape& s, proto::PartialShape::Builder b);
// The shape, or DataLoss for a dim below -1.
Result<PartialShape> PartialShapeFromProto(proto::PartialShape::Reader r);

// Copies t's bytes into b; InvalidArgument when t holds more than 512 MiB
// (the largest Data blob Cap'n Proto allows).
Status TensorToProto(const Tensor& t, proto::Tensor::Builder b);
// A new tensor with r's bytes; DataLoss when the byte count does not match
// dtype and shape, a dim is negative or the dtype is unknown.
Result<Tensor> TensorFromProto(proto::Tensor::Reader r);

}  // namespace sf
