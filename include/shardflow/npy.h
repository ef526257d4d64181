// Reading and writing NumPy .npy files (format versions 1.0, 2.0 and 3.0),
// for feeding tensors to and fetching them from `shardflow run`.
//
//   SF_ASSIGN_OR_RETURN(sf::Tensor x, sf::ReadNpy("x.npy"));
//   SF_RETURN_IF_ERROR(sf::WriteNpy("y.npy", y));
//
// Supported element types: '<f4' float32, '<f8' float64, '<i4' int32,
// '<i8' int64 and '|b1' bool, in C order ('=' and '|' byte orders are read
// as native little-endian too). Fortran-order arrays of rank >= 2 and
// big-endian arrays are refused with an error saying how to convert them.
// Thread-safety: free functions; concurrent calls on different files are safe.
#pragma once

#include <string>

#include "shardflow/status.h"
#include "shardflow/tensor.h"

namespace sf {

// The array stored in `path`. NotFound if the file is missing; DataLoss for a
// bad magic, a malformed header or truncated data; InvalidArgument for an
// unsupported dtype or Fortran order. Messages name the file.
Result<Tensor> ReadNpy(const std::string& path);

// Writes t to `path` as a version 1.0 .npy file (2.0 when the header needs
// it). InvalidArgument for a dtype .npy cannot hold here (resource, float16,
// bfloat16, invalid); Unavailable naming the file if it cannot be written.
Status WriteNpy(const std::string& path, const Tensor& t);

// The .npy encoding of t in memory; InvalidArgument as for WriteNpy.
Result<std::string> NpyBytes(const Tensor& t);

// Decodes .npy bytes; `source` names them in error messages.
Result<Tensor> ParseNpy(const std::string& bytes, const std::string& source = "<npy bytes>");

}  // namespace sf
