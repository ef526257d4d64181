// EtcdElection: etcd's election recipe over EtcdClient's transactions,
// ranges and watches.
#include "cluster/etcd_election.h"

#include <cstdio>

#include "cluster/etcd_json.h"
#include "cluster/etcd_transport.h"

namespace sf {
namespace cluster {

namespace {

using Clock = std::chrono::steady_clock;

std::string Hex(int64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%llx", static_cast<unsigned long long>(v));
  return buf;
}

// The first key under prefix by create_revision, among those created at or
// before max_create_revision (0: all) when descending.
Result<std::optional<EtcdKeyValue>> FirstByCreation(EtcdClient& client, const std::string& prefix, bool descending,
                                                     int64_t max_create_revision, int64_t* read_revision) {
  EtcdRangeSpec spec;
  spec.key = prefix;
  spec.prefix = true;
  spec.limit = 1;
  spec.max_create_revision = max_create_revision;
  spec.sort = descending ? EtcdRangeSpec::Sort::kCreateDescending : EtcdRangeSpec::Sort::kCreateAscending;
  SF_ASSIGN_OR_RETURN(EtcdRangeResult r, EtcdRange(*client.transport(), spec,
                                                   Clock::now() + client.options().request_timeout));
  if (read_revision != nullptr) *read_revision = r.revision;
  if (r.kvs.empty()) return std::optional<EtcdKeyValue>();
  return std::optional<EtcdKeyValue>(std::move(r.kvs[0]));
}

}  // namespace

EtcdElection::EtcdElection(EtcdClient* client, std::string prefix, std::string candidate)
    : client_(client), prefix_(std::move(prefix) + "/"), candidate_(std::move(candidate)) {}

Status EtcdElection::Campaign(const std::string& value, int64_t lease, std::chrono::milliseconds timeout) {
  if (lease == 0) return InvalidArgument("etcd election " + prefix_ + ": a candidate needs a lease");
  const auto deadline = Clock::now() + timeout;
  leading_ = false;
  key_ = prefix_ + (candidate_.empty() ? Hex(lease) : candidate_);
  // Create the key unless this lease already campaigns (then keep its place).
  for (int attempt = 0;; ++attempt) {
    SF_ASSIGN_OR_RETURN(EtcdTxnResult txn, client_->Txn({EtcdCompare::CreateRevision(key_, EtcdCompare::Op::kEqual, 0)},
                                                        {EtcdOp::Put(key_, value, lease)}, {EtcdOp::Get(key_)}));
    if (txn.succeeded) {
      revision_ = txn.revision;
      break;
    }
    if (txn.ranges.empty() || txn.ranges[0].kvs.empty()) {
      if (attempt < 3) continue;  // gone meanwhile: create it
      return Aborted("etcd election " + prefix_ + ": its key " + key_ + " vanished while it entered");
    }
    const EtcdKeyValue& held = txn.ranges[0].kvs[0];
    if (held.lease != lease && attempt < 3) {
      // A named candidate's earlier campaign under another lease (an
      // earlier life of it): the name is this candidate's, so its key goes
      // (a leader it was is fenced by its create_revision) and it enters anew.
      SF_RETURN_IF_ERROR(client_->Txn({EtcdCompare::ModRevision(key_, EtcdCompare::Op::kEqual, held.mod_revision)},
                                      {EtcdOp::Delete(key_)}, {})
                             .status());
      continue;
    }
    revision_ = held.create_revision;
    if (held.value != value) SF_RETURN_IF_ERROR(client_->Put(key_, value, lease).status());
    break;
  }
  for (;;) {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (canceled_) return Withdraw(Aborted("etcd election " + prefix_ + ": campaign canceled"));
    }
    if (Clock::now() >= deadline)
      return Withdraw(DeadlineExceeded("etcd election " + prefix_ + ": not leader within " +
                                       std::to_string(timeout.count()) + " ms"));
    int64_t read_at = 0;
    auto pred = FirstByCreation(*client_, prefix_, true, revision_ - 1, &read_at);
    if (!pred.ok()) return Withdraw(pred.status());
    if (!pred->has_value()) break;
    Status s = WaitForDeletion((*pred)->key, read_at, deadline);
    if (!s.ok()) return Withdraw(s);
  }
  // No one before it: it leads, if its key is still the one it created (its
  // lease may have ended while it waited).
  auto mine = client_->Get(key_);
  if (!mine.ok()) return Withdraw(mine.status());
  if (!mine->has_value() || (*mine)->create_revision != revision_)
    return Withdraw(Aborted("etcd election " + prefix_ + ": its key " + key_ + " vanished while it waited (lease ended)"));
  leading_ = true;
  return Status::OK();
}

Status EtcdElection::WaitForDeletion(const std::string& pred, int64_t rev, Clock::time_point deadline) {
  bool deleted = false;  // GUARDED_BY(mu_)
  auto watch = client_->WatchKey(pred, rev + 1, [&](const std::vector<EtcdWatchEvent>& events) {
    for (const auto& e : events) {
      if (e.type == EtcdWatchEvent::Type::kPut) continue;
      std::lock_guard<std::mutex> l(mu_);
      deleted = true;  // a delete, or an error: look again either way
      cv_.notify_all();
    }
  });
  if (!watch.ok()) return watch.status();
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait_until(l, deadline, [&] { return deleted || canceled_; });
  return Status::OK();  // the caller checks cancel and the deadline, then looks again
}

Status EtcdElection::Withdraw(Status why) {
  Status r = Resign();
  if (!r.ok()) return why.WithPrefix("(withdrawing failed too: " + r.ToString() + ")");
  return why;
}

Status EtcdElection::Resign() {
  leading_ = false;
  if (key_.empty()) return Status::OK();
  auto txn = client_->Txn({EtcdCompare::CreateRevision(key_, EtcdCompare::Op::kEqual, revision_)},
                          {EtcdOp::Delete(key_)}, {});
  if (!txn.ok()) return txn.status();
  key_.clear();
  revision_ = 0;
  return Status::OK();
}

void EtcdElection::Cancel() {
  std::lock_guard<std::mutex> l(mu_);
  canceled_ = true;
  cv_.notify_all();
}

Result<std::optional<EtcdKeyValue>> EtcdElection::Leader() const { return FirstByCreation(*client_, prefix_, false, 0, nullptr); }

Result<std::optional<EtcdKeyValue>> EtcdElection::Leader(EtcdClient& client, const std::string& prefix) {
  return FirstByCreation(client, prefix + "/", false, 0, nullptr);
}

}  // namespace cluster
}  // namespace sf
