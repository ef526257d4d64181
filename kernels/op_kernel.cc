#include "shardflow/kernel.h"

#define EIGEN_USE_THREADS
#include <unsupported/Eigen/CXX11/Tensor>

#include "kernels/compute_pool.h"

namespace sf {

const char* DeviceTypeName(DeviceType d) { return d == DeviceType::kGPU ? "GPU" : "CPU"; }

const std::string& OpKernelContext::frame_key() const {
  static const std::string* const kRoot = new std::string();
  return frame_key_ ? *frame_key_ : *kRoot;
}

const Eigen::ThreadPoolDevice& OpKernelContext::eigen_device() const {
  return pool_->eigen_device();
}

Status KernelRegistry::Register(const std::string& op, DeviceType device, DType dtype,
                                KernelFactory f) {
  auto key = std::make_tuple(op, device, dtype);
  if (kernels_.count(key))
    return InvalidArgument("kernel for op " + op + " on " + DeviceTypeName(device) + " for " +
                           DTypeName(dtype) + " is registered twice");
  kernels_.emplace(key, std::move(f));
  return Status::OK();
}

Result<const KernelFactory*> KernelRegistry::Find(const std::string& op, DeviceType device,
                                                  DType dtype) const {
  auto it = kernels_.find(std::make_tuple(op, device, dtype));
  if (it == kernels_.end()) it = kernels_.find(std::make_tuple(op, device, DType::kInvalid));
  if (it == kernels_.end())
    return NotFound(std::string("no ") + DeviceTypeName(device) + " kernel for op " + op +
                    " with dtype " + DTypeName(dtype));
  return &it->second;
}

bool KernelRegistry::Has(const std::string& op, DeviceType device, DType dtype) const {
  return Find(op, device, dtype).ok();
}

std::vector<std::tuple<std::string, DeviceType, DType>> KernelRegistry::Keys() const {
  std::vector<std::tuple<std::string, DeviceType, DType>> out;
  for (const auto& kv : kernels_) out.push_back(kv.first);
  return out;
}

}  // namespace sf
