// What each namespace may make a node hold (actors/namespace_quotas.h).
#include "actors/namespace_quotas.h"

#include <algorithm>

#include "graph/namespaces.h"

namespace sf {

namespace {

const char* KindName(NamespaceQuotas::Kind k) {
  switch (k) {
    case NamespaceQuotas::Kind::kVariable: return "variables";
    case NamespaceQuotas::Kind::kTable: return "tables";
    case NamespaceQuotas::Kind::kQueue: return "queues";
  }
  return "?";
}

std::string Shown(const std::string& ns) { return ns.empty() ? kDefaultNamespace : ns; }

}  // namespace

Status NamespaceQuotas::Take(Kind kind, const std::string& name, int64_t bytes, bool enforce) {
  const std::string ns = NamespaceOf(name);
  std::lock_guard<std::mutex> l(mu_);
  NamespaceUsage& u = used_[ns];
  u.ns = ns;
  int64_t& count = kind == Kind::kVariable ? u.variables : kind == Kind::kTable ? u.tables : u.queues;
  const int64_t limit = kind == Kind::kVariable ? limits_.variables : kind == Kind::kTable ? limits_.tables : limits_.queues;
  if (enforce && count + 1 > limit)
    return ResourceExhausted("namespace '" + Shown(ns) + "' holds " + std::to_string(count) + " " + KindName(kind) +
                             " on this node, its quota (--ns-max-" + KindName(kind) + " " + std::to_string(limit) +
                             "): '" + name + "' refused");
  if (enforce && bytes > 0 && u.bytes + bytes > limits_.bytes)
    return ResourceExhausted("namespace '" + Shown(ns) + "' holds " + std::to_string(u.bytes) +
                             " bytes on this node; '" + name + "' (" + std::to_string(bytes) +
                             " bytes) would pass its quota (--ns-max-bytes " + std::to_string(limits_.bytes) + ")");
  ++count;
  u.bytes += std::max<int64_t>(0, bytes);
  return Status::OK();
}

Status NamespaceQuotas::TakeBytes(const std::string& name, int64_t bytes, bool enforce) {
  if (bytes <= 0) return Status::OK();
  const std::string ns = NamespaceOf(name);
  std::lock_guard<std::mutex> l(mu_);
  NamespaceUsage& u = used_[ns];
  u.ns = ns;
  if (enforce && u.bytes + bytes > limits_.bytes)
    return ResourceExhausted("namespace '" + Shown(ns) + "' holds " + std::to_string(u.bytes) +
                             " bytes on this node; '" + name + "' growing by " + std::to_string(bytes) +
                             " bytes would pass its quota (--ns-max-bytes " + std::to_string(limits_.bytes) + ")");
  u.bytes += bytes;
  return Status::OK();
}

void NamespaceQuotas::Give(Kind kind, const std::string& name, int64_t bytes) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = used_.find(NamespaceOf(name));
  if (it == used_.end()) return;
  NamespaceUsage& u = it->second;
  int64_t& count = kind == Kind::kVariable ? u.variables : kind == Kind::kTable ? u.tables : u.queues;
  count = std::max<int64_t>(0, count - 1);
  u.bytes = std::max<int64_t>(0, u.bytes - std::max<int64_t>(0, bytes));
}

void NamespaceQuotas::GiveBytes(const std::string& name, int64_t bytes) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = used_.find(NamespaceOf(name));
  if (it != used_.end()) it->second.bytes = std::max<int64_t>(0, it->second.bytes - std::max<int64_t>(0, bytes));
}

namespace {

class NamespaceRowBudget final : public HashMemoryBudget {
 public:
  NamespaceRowBudget(std::shared_ptr<NamespaceQuotas> q, std::string name) : q_(std::move(q)), name_(std::move(name)) {}
  Status Take(int64_t bytes) override { return q_->TakeBytes(name_, bytes, true); }
  void Give(int64_t bytes) override { q_->GiveBytes(name_, bytes); }

 private:
  std::shared_ptr<NamespaceQuotas> q_;
  std::string name_;
};

}  // namespace

std::shared_ptr<HashMemoryBudget> NamespaceQuotas::RowBudget(std::shared_ptr<NamespaceQuotas> quotas,
                                                             std::string name) {
  return std::make_shared<NamespaceRowBudget>(std::move(quotas), std::move(name));
}

void NamespaceQuotas::Clear(const std::string& ns) {
  std::lock_guard<std::mutex> l(mu_);
  used_.erase(ns == kDefaultNamespace ? "" : ns);
}

std::vector<NamespaceUsage> NamespaceQuotas::Usage() const {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<NamespaceUsage> out;
  for (const auto& kv : used_)
    if (kv.second.variables || kv.second.tables || kv.second.queues || kv.second.bytes) out.push_back(kv.second);
  return out;
}

}  // namespace sf
