#include "examples/common/fashion_mnist_data.h"

#include <zlib.h>

#include <cstring>
#include <fstream>
#include <vector>

namespace sf::examples {

namespace {

Result<std::vector<uint8_t>> ReadGz(const std::string& path) {
  std::ifstream probe(path);
  if (!probe)
    return NotFound("cannot open " + path +
                    ": install Debian's dataset-fashion-mnist package (scripts/setup does)");
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) return NotFound("cannot open " + path);
  std::vector<uint8_t> out;
  uint8_t buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof buf)) > 0) out.insert(out.end(), buf, buf + n);
  int err = 0;
  const char* msg = gzerror(f, &err);
  gzclose(f);
  if (n < 0 || (err != Z_OK && err != Z_STREAM_END))
    return DataLoss(path + " is not a valid gzip file: " + msg);
  return out;
}

uint32_t BigEndian32(const uint8_t* p) {
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | p[3];
}

}  // namespace

Result<Dataset> LoadFashionMnist(const std::string& dir, const std::string& split) {
  const std::string ipath = dir + "/" + split + "-images-idx3-ubyte.gz";
  const std::string lpath = dir + "/" + split + "-labels-idx1-ubyte.gz";
  SF_ASSIGN_OR_RETURN(std::vector<uint8_t> img, ReadGz(ipath));
  SF_ASSIGN_OR_RETURN(std::vector<uint8_t> lab, ReadGz(lpath));
  if (img.size() < 16 || BigEndian32(img.data()) != 0x00000803)
    return DataLoss(ipath + ": not an IDX image file (bad magic)");
  if (lab.size() < 8 || BigEndian32(lab.data()) != 0x00000801)
    return DataLoss(lpath + ": not an IDX label file (bad magic)");
  const int64_t n = BigEndian32(img.data() + 4), rows = BigEndian32(img.data() + 8),
                cols = BigEndian32(img.data() + 12);
  const int64_t nl = BigEndian32(lab.data() + 4);
  if (rows != 28 || cols != 28) return DataLoss(ipath + ": images are not 28x28");
  if (static_cast<int64_t>(img.size()) != 16 + n * 784)
    return DataLoss(ipath + ": truncated (" + std::to_string(img.size()) + " bytes for " +
                    std::to_string(n) + " images)");
  if (nl != n || static_cast<int64_t>(lab.size()) != 8 + n)
    return DataLoss(lpath + ": " + std::to_string(nl) + " labels for " + std::to_string(n) + " images");
  Dataset d;
  d.images = Tensor(DType::kFloat32, {n, 784});
  d.labels = Tensor(DType::kInt32, {n});
  Eigen::Map<const Eigen::Array<uint8_t, Eigen::Dynamic, 1>> pix(img.data() + 16, n * 784);
  Eigen::Map<Eigen::ArrayXf>(d.images.data<float>(), n * 784) = pix.cast<float>() / 255.0f;
  for (int64_t i = 0; i < n; ++i) {
    if (lab[8 + i] > 9) return DataLoss(lpath + ": label " + std::to_string(lab[8 + i]) + " at " + std::to_string(i));
    d.labels.data<int32_t>()[i] = lab[8 + i];
  }
  return d;
}

void MakeBatch(const Dataset& d, const std::vector<int64_t>& order, int64_t begin, int64_t n,
               Tensor* images, Tensor* labels) {
  *images = Tensor(DType::kFloat32, {n, 784});
  *labels = Tensor(DType::kInt32, {n});
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = order[begin + i];
    std::memcpy(images->data<float>() + i * 784, d.images.data<float>() + r * 784, 784 * sizeof(float));
    labels->data<int32_t>()[i] = d.labels.data<int32_t>()[r];
  }
}

}  // namespace sf::examples
