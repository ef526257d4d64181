// MemberAddresses (cluster/member_addresses.h).
#include "cluster/member_addresses.h"

namespace sf {
namespace cluster {

void MemberAddresses::Update(const std::vector<MemberRecord>& records) {
  std::lock_guard<std::mutex> l(mu_);
  latest_ = records;
  for (const auto& r : records) {
    if (!known_.insert(r.address).second) continue;
    known_order_.push_back(r.address);
    if (known_order_.size() > max_known_) {
      known_.erase(known_order_.front());
      known_order_.pop_front();
    }
  }
  cv_.notify_all();
}

std::vector<MemberRecord> MemberAddresses::Latest() const {
  std::lock_guard<std::mutex> l(mu_);
  return latest_;
}

bool MemberAddresses::KnowsLocked(const std::string& address) const {
  if (known_.count(address)) return true;
  for (const auto& m : latest_)  // a current member evicted from the known set
    if (m.address == address) return true;
  return false;
}

bool MemberAddresses::Knows(const std::string& address) const {
  std::lock_guard<std::mutex> l(mu_);
  return KnowsLocked(address);
}

bool MemberAddresses::WaitKnown(const std::string& address, std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait_until(l, deadline, [&] { return closed_ || KnowsLocked(address); });
  return KnowsLocked(address);
}

void MemberAddresses::Close() {
  std::lock_guard<std::mutex> l(mu_);
  closed_ = true;
  cv_.notify_all();
}

}  // namespace cluster
}  // namespace sf
