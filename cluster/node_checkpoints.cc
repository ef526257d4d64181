// A node's part in node checkpoints (cluster/node_checkpoints.h).
#include "cluster/node_checkpoints.h"

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <future>
#include <optional>

#include "actors/checkpoint_io.h"
#include "storage/checkpoint.h"
#include "storage/kv_store.h"

namespace sf {
namespace cluster {

namespace {

std::string Hex(uint64_t token) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016" PRIx64, token);
  return buf;
}

// A token travels through the index as an int64 scalar (the same bits).
int64_t TokenBits(uint64_t token) {
  int64_t v;
  std::memcpy(&v, &token, sizeof(v));
  return v;
}
uint64_t TokenOf(int64_t bits) {
  uint64_t v;
  std::memcpy(&v, &bits, sizeof(v));
  return v;
}

// The one checkpoint a piece's store holds (its newest committed).
Result<CheckpointInfo> PieceManifest(CheckpointReader& reader, const std::string& path) {
  auto id = reader.LatestCommitted();
  if (!id.ok()) return NotFound("piece '" + path + "' holds no committed checkpoint");
  return reader.Manifest(*id);
}

// The int64 scalar `name` of an index record.
Result<int64_t> RecordValue(CheckpointReader& reader, const CheckpointInfo& info, const char* name) {
  SF_ASSIGN_OR_RETURN(Tensor t, reader.Read(info, name));
  if (t.dtype() != DType::kInt64 || t.num_elements() != 1)
    return DataLoss(std::string("node checkpoint ") + std::to_string(info.id) + ": index record '" + name +
                    "' is not an int64 scalar");
  return t.data<int64_t>()[0];
}

}  // namespace

std::string PiecePath(const std::string& dir, uint64_t token, int task) {
  return dir + "/pieces-" + Hex(token) + "/task-" + std::to_string(task);
}

NodeCheckpoints::NodeCheckpoints(Hooks hooks) : hooks_(std::move(hooks)) {}

NodeCheckpoints::~NodeCheckpoints() { Stop(); }

Status NodeCheckpoints::Post(net::SaveShards r, Done done) {
  return Queue(Job{[this, r = std::move(r)] { return Save(r); }, std::move(done)});
}
Status NodeCheckpoints::Post(net::CommitShards r, Done done) {
  return Queue(Job{[this, r = std::move(r)] { return Commit(r); }, std::move(done)});
}
Status NodeCheckpoints::Post(net::RestoreShards r, Done done) {
  return Queue(Job{[this, r = std::move(r)] { return Restore(r); }, std::move(done)});
}

Status NodeCheckpoints::Queue(Job job) {
  std::lock_guard<std::mutex> l(mu_);
  if (stopped_) return Unavailable("node " + hooks_.node_name + " is stopping");
  if (jobs_.size() >= kMaxQueued)
    return ResourceExhausted("node " + hooks_.node_name + " has " + std::to_string(jobs_.size()) +
                             " checkpoint requests waiting already; try again");
  jobs_.push_back(std::move(job));
  if (!thread_.joinable()) thread_ = std::thread([this] { Loop(); });
  cv_.notify_all();
  return Status::OK();
}

void NodeCheckpoints::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stopped_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void NodeCheckpoints::Loop() {
  std::unique_lock<std::mutex> l(mu_);
  while (true) {
    cv_.wait(l, [&] { return stopped_ || !jobs_.empty(); });
    if (jobs_.empty()) return;  // stopped
    Job job = std::move(jobs_.front());
    jobs_.pop_front();
    const bool stopping = stopped_;
    l.unlock();
    Result<net::ShardsDone> r = Unavailable("node " + hooks_.node_name + " is stopping");
    if (!stopping) r = job.work();
    if (r.ok()) job.done(std::move(r));
    else job.done(r.status().WithPrefix("node " + hooks_.node_name));
    l.lock();
  }
}

Result<std::string> NodeCheckpoints::Dir(const std::string& dir) const {
  if (hooks_.root.empty())
    return FailedPrecondition("node checkpoint directory '" + dir +
                              "' refused: this node has no checkpoint root (shardflow node --checkpoint-dir DIR)");
  SF_RETURN_IF_ERROR(runtime::CheckRelativeCheckpointDir(dir));
  return hooks_.root + "/" + dir;
}

std::optional<Tensor> NodeCheckpoints::ReadOne(const std::string& name) {
  std::promise<Values> p;
  auto f = p.get_future();
  hooks_.read({name}, [&p](Values v) { p.set_value(std::move(v)); });
  for (auto& [n, value] : f.get())
    if (n == name) return std::move(value);
  return std::nullopt;
}

Result<net::ShardsDone> NodeCheckpoints::Save(const net::SaveShards& r) {
  SF_ASSIGN_OR_RETURN(std::string dir, Dir(r.dir));
  if (r.token == 0) return InvalidArgument("SaveShards: token 0 names no checkpoint");
  if (r.task < 0) return InvalidArgument("SaveShards: task " + std::to_string(r.task) + " is negative");
  std::error_code ec;
  // Pieces of checkpoints retention dropped (or never committed) go first.
  for (uint64_t t : r.drop) std::filesystem::remove_all(dir + "/pieces-" + Hex(t), ec);
  const std::string path = PiecePath(dir, r.token, r.task);
  // A piece is written once: what a failed try of this token left is replaced.
  std::filesystem::remove_all(path, ec);
  std::filesystem::create_directories(path, ec);
  if (ec) return Internal("cannot create checkpoint piece directory '" + path + "': " + ec.message());
  SF_ASSIGN_OR_RETURN(auto writer, runtime::GraphCheckpointWriter::Begin(nullptr, path, r.global_step));
  net::ShardsDone done;
  done.token = r.token;
  done.global_step = r.global_step;
  // One variable at a time: the node holds at most one extra copy.
  for (const std::string& name : r.names) {
    std::optional<Tensor> value = ReadOne(name);
    if (!value) continue;  // not initialised here: as a client's Save, it is not saved
    SF_RETURN_IF_ERROR(writer->Add(name, *value).WithPrefix("writing '" + name + "' to piece '" + path + "'"));
    ++done.variables;
    done.bytes += static_cast<int64_t>(value->bytes());
  }
  SF_ASSIGN_OR_RETURN(done.id, writer->Commit());
  return done;
}

Result<net::ShardsDone> NodeCheckpoints::Commit(const net::CommitShards& r) {
  SF_ASSIGN_OR_RETURN(std::string dir, Dir(r.dir));
  if (r.token == 0) return InvalidArgument("CommitShards: token 0 names no checkpoint");
  if (r.tasks <= 0) return InvalidArgument("CommitShards: " + std::to_string(r.tasks) + " tasks");
  if (r.keep_last < 0) return InvalidArgument("CommitShards: keep_last " + std::to_string(r.keep_last) + " is negative");
  const std::string index = dir + "/index";
  net::ShardsDone done;
  done.token = r.token;
  done.global_step = r.global_step;
  {
    std::error_code ec;
    std::filesystem::create_directories(index, ec);
    if (ec) return Internal("cannot create checkpoint index '" + index + "': " + ec.message());
    SF_ASSIGN_OR_RETURN(auto writer, runtime::GraphCheckpointWriter::Begin(nullptr, index, r.global_step));
    SF_RETURN_IF_ERROR(writer->Add("token", Tensor::Scalar<int64_t>(TokenBits(r.token))));
    SF_RETURN_IF_ERROR(writer->Add("tasks", Tensor::Scalar<int64_t>(r.tasks)));
    SF_ASSIGN_OR_RETURN(done.id, writer->Commit());
  }
  if (r.keep_last == 0) return done;
  // The tokens of the records retention drops, read before they go.
  SF_ASSIGN_OR_RETURN(auto kv, OpenCheckpointStore(index, false));
  CheckpointReader reader(kv.get());
  SF_ASSIGN_OR_RETURN(std::vector<int64_t> ids, reader.List());
  std::vector<uint64_t> dropped;
  for (size_t i = 0; i + static_cast<size_t>(r.keep_last) < ids.size(); ++i) {
    auto info = reader.Manifest(ids[i]);
    if (!info.ok()) continue;  // an uncommitted record holds no token worth keeping
    auto bits = RecordValue(reader, *info, "token");
    if (bits.ok()) dropped.push_back(TokenOf(*bits));
  }
  SF_RETURN_IF_ERROR(RetainCheckpoints(kv.get(), r.keep_last).status());
  std::error_code ec;
  for (uint64_t t : dropped) std::filesystem::remove_all(dir + "/pieces-" + Hex(t), ec);
  done.dropped = std::move(dropped);
  return done;
}

Result<net::ShardsDone> NodeCheckpoints::Restore(const net::RestoreShards& r) {
  SF_ASSIGN_OR_RETURN(std::string dir, Dir(r.dir));
  if (r.task < 0) return InvalidArgument("RestoreShards: task " + std::to_string(r.task) + " is negative");
  net::ShardsDone done;
  done.token = r.token;
  done.id = r.id;
  if (done.token == 0) {
    // The record: the newest readable one, or the one asked for.
    const std::string index = dir + "/index";
    if (!std::filesystem::exists(index)) return NotFound("no node checkpoint in '" + r.dir + "' (no " + index + ")");
    SF_ASSIGN_OR_RETURN(auto kv, OpenCheckpointStore(index, false));
    CheckpointReader reader(kv.get());
    if (done.id < 0) {
      auto latest = reader.LatestReadable();
      if (!latest.ok()) return NotFound("no committed node checkpoint in '" + r.dir + "'");
      done.id = *latest;
    }
    SF_ASSIGN_OR_RETURN(CheckpointInfo info, reader.Manifest(done.id));
    SF_ASSIGN_OR_RETURN(int64_t bits, RecordValue(reader, info, "token"));
    SF_ASSIGN_OR_RETURN(int64_t tasks, RecordValue(reader, info, "tasks"));
    if (r.task >= tasks)
      return InvalidArgument("node checkpoint " + std::to_string(done.id) + " in '" + r.dir + "' has " +
                             std::to_string(tasks) + " tasks; task " + std::to_string(r.task) + " is not one");
    done.token = TokenOf(bits);
    done.global_step = info.global_step;
  }
  const std::string path = PiecePath(dir, done.token, r.task);
  if (!std::filesystem::exists(path))
    return NotFound("node checkpoint piece '" + path + "' is missing (written on a node whose --checkpoint-dir " +
                    "this node does not see?)");
  SF_ASSIGN_OR_RETURN(auto kv, OpenCheckpointStore(path, false));
  CheckpointReader reader(kv.get());
  SF_ASSIGN_OR_RETURN(CheckpointInfo info, PieceManifest(reader, path));
  done.global_step = info.global_step;
  // One variable at a time, read then assigned: the node holds at most one extra copy.
  for (const std::string& name : r.names) {
    if (!info.Find(name))
      return NotFound("variable '" + name + "' is not in node checkpoint piece '" + path + "'");
    SF_ASSIGN_OR_RETURN(Tensor value, reader.Read(info, name));
    done.bytes += static_cast<int64_t>(value.bytes());
    std::promise<Status> p;
    auto f = p.get_future();
    Values one;
    one.emplace_back(name, std::move(value));
    hooks_.assign(std::move(one), [&p](Status s) { p.set_value(std::move(s)); });
    SF_RETURN_IF_ERROR(f.get().WithPrefix("assigning '" + name + "' from piece '" + path + "'"));
    ++done.variables;
  }
  return done;
}

}  // namespace cluster
}  // namespace sf
