// CheckpointDir (include/shardflow/checkpoint.h): a read-only view of a
// checkpoint directory through CheckpointReader.
#include <mutex>

#include "shardflow/checkpoint.h"
#include "storage/checkpoint.h"
#include "storage/kv_store.h"

namespace sf {

struct CheckpointDir::Impl {
  std::string dir;
  std::unique_ptr<KvStore> kv;
  // CheckpointReader keeps no state between calls, but its methods are not
  // const: one at a time keeps the view safe to share.
  std::mutex mu;
  std::unique_ptr<CheckpointReader> reader;  // GUARDED_BY(mu)
};

CheckpointDir::CheckpointDir(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CheckpointDir::~CheckpointDir() = default;

Result<std::unique_ptr<CheckpointDir>> CheckpointDir::Open(const std::string& dir) {
  SF_ASSIGN_OR_RETURN(auto kv, OpenCheckpointStore(dir, /*create=*/false));
  auto impl = std::make_unique<Impl>();
  impl->dir = dir;
  impl->kv = std::move(kv);
  impl->reader = std::make_unique<CheckpointReader>(impl->kv.get());
  return std::unique_ptr<CheckpointDir>(new CheckpointDir(std::move(impl)));
}

Result<std::vector<int64_t>> CheckpointDir::List() const {
  std::lock_guard<std::mutex> l(impl_->mu);
  return impl_->reader->List();
}

Result<int64_t> CheckpointDir::Latest() const {
  std::lock_guard<std::mutex> l(impl_->mu);
  auto id = impl_->reader->LatestCommitted();
  if (!id.ok()) return NotFound("no committed checkpoint in '" + impl_->dir + "'");
  return id;
}

Result<CheckpointDir::Summary> CheckpointDir::Describe(int64_t id) const {
  std::lock_guard<std::mutex> l(impl_->mu);
  SF_ASSIGN_OR_RETURN(CheckpointInfo info, impl_->reader->Manifest(id));
  Summary s;
  s.id = info.id;
  s.global_step = info.global_step;
  s.parent = info.parent;
  for (const CheckpointVariable& v : info.variables) s.variables.push_back({v.name, v.dtype, v.shape, v.num_blocks});
  return s;
}

Status CheckpointDir::Verify(int64_t id) const {
  std::lock_guard<std::mutex> l(impl_->mu);
  return impl_->reader->Verify(id);
}

Result<Tensor> CheckpointDir::Read(int64_t id, const std::string& name) const {
  std::lock_guard<std::mutex> l(impl_->mu);
  SF_ASSIGN_OR_RETURN(CheckpointInfo info, impl_->reader->Manifest(id));
  if (info.parent < 0) return impl_->reader->Read(info, name);
  // An increment holds only changed rows: compose it over its chain.
  SF_ASSIGN_OR_RETURN(auto all, impl_->reader->ReadAll(id));
  auto it = all.find(name);
  if (it == all.end())
    return NotFound("variable '" + name + "' is not in checkpoint " + std::to_string(id) + " in '" + impl_->dir + "'");
  return it->second;
}

}  // namespace sf
