// Reading Fashion-MNIST from Debian's dataset-fashion-mnist package (gzipped
// IDX files) into tensors.
#pragma once

#include <string>

#include "shardflow/tensor.h"

namespace sf::examples {

// Where Debian's dataset-fashion-mnist puts the files.
inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

struct Dataset {
  Tensor images;  // float32 [N, 784], scaled to [0, 1]
  Tensor labels;  // int32 [N], 0..9
  int64_t size() const { return labels.num_elements(); }
};

// Reads "<dir>/<split>-images-idx3-ubyte.gz" and the labels (split = "train"
// or "t10k"). NotFound naming the package when the files are missing;
// DataLoss naming the file when one is corrupt or the counts differ.
Result<Dataset> LoadFashionMnist(const std::string& dir, const std::string& split);

// Copies the rows `order[begin, begin + n)` of d into a batch.
void MakeBatch(const Dataset& d, const std::vector<int64_t>& order, int64_t begin, int64_t n,
               Tensor* images, Tensor* labels);

}  // namespace sf::examples
