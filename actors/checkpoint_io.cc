// Checkpoint I/O shared by the sessions (actors/checkpoint_io.h).
#include "actors/checkpoint_io.h"

#include <algorithm>
#include <filesystem>
#include <future>
#include <mutex>

#include "graph/path_attrs.h"
#include "kernels/checkpoint_service.h"
#include "kernels/hash_embedding.h"

#include "storage/embedding_reshard.h"

namespace sf {
namespace runtime {

std::map<std::string, CheckpointTable> GraphTables(const Graph& g) {
  std::map<std::string, CheckpointTable> tables;
  std::map<std::string, std::string> lookup_partition;
  for (int i = 0; i < g.num_nodes(); ++i) {
    const Node& n = g.node(i);
    if (n.op == "EmbeddingShardLookup") {
      auto t = n.attrs.Get<std::string>("table");
      auto p = n.attrs.Get<std::string>("partition");
      if (t.ok() && p.ok()) lookup_partition[*t] = *p;
    }
    if (n.op != "VarHandle") continue;
    auto table = n.attrs.Get<std::string>("_embedding_table");
    auto shape = n.attrs.Get<PartialShape>("shape");
    if (!table.ok() || !shape.ok() || !shape->fully_defined() || shape->rank() < 1) continue;
    CheckpointTable& t = tables[*table];
    t.name = *table;
    t.rows += shape->dim(0);
    t.num_shards += 1;
    auto p = n.attrs.Get<std::string>("_embedding_partition");
    if (p.ok()) t.partition = *p;
  }
  // Graphs built before the partition was recorded on the handles: the
  // lookups say it (mod when there are none).
  for (auto& kv : tables)
    if (kv.second.partition.empty())
      kv.second.partition = lookup_partition.count(kv.first) ? lookup_partition[kv.first] : "mod";
  return tables;
}

namespace {

// RocksDB locks a directory for one open per process: writers of one
// process that write the same directory take turns.
std::mutex& DirMutex(const std::string& dir) {
  static std::mutex* mu = new std::mutex();
  static auto* by_dir = new std::map<std::string, std::unique_ptr<std::mutex>>();
  std::lock_guard<std::mutex> l(*mu);
  auto& m = (*by_dir)[dir];
  if (!m) m = std::make_unique<std::mutex>();
  return *m;
}

class StoreCheckpointService : public CheckpointService {
 public:
  Result<int64_t> Save(const std::string& dir, int64_t step, const std::vector<std::string>& names,
                       const std::vector<Tensor>& values) override {
    if (names.size() != values.size())
      return InvalidArgument("checkpoint of " + std::to_string(names.size()) + " names but " +
                             std::to_string(values.size()) + " values");
    SF_ASSIGN_OR_RETURN(auto writer, GraphCheckpointWriter::Begin(nullptr, dir, step));
    for (size_t i = 0; i < names.size(); ++i) SF_RETURN_IF_ERROR(writer->Add(names[i], values[i]));
    return writer->Commit();
  }

  Result<std::vector<Tensor>> Restore(const std::string& dir, const std::vector<std::string>& names,
                                      int64_t* step) override {
    const std::set<std::string> wanted(names.begin(), names.end());
    SF_ASSIGN_OR_RETURN(CheckpointRead read, ReadCheckpoint(dir, -1, [&](CheckpointReader& r, const CheckpointInfo& info) {
                          return ReadNamed(r, info, wanted);
                        }));
    std::vector<Tensor> out;
    for (const auto& n : names) {
      auto it = read.values.find(n);
      if (it == read.values.end())
        return NotFound("variable '" + n + "' is not in checkpoint " + std::to_string(read.info.id) + " in '" + dir +
                        "'");
      out.push_back(it->second);
    }
    *step = read.info.global_step;
    return out;
  }
};

}  // namespace

Result<std::unique_ptr<GraphCheckpointWriter>> GraphCheckpointWriter::Begin(const Graph* g, const std::string& dir,
                                                                            int64_t global_step, int64_t parent) {
  std::unique_ptr<GraphCheckpointWriter> w(new GraphCheckpointWriter());
  w->dir_lock_ = std::unique_lock<std::mutex>(DirMutex(dir));
  SF_ASSIGN_OR_RETURN(w->kv_, OpenCheckpointStore(dir, true));
  SF_ASSIGN_OR_RETURN(w->writer_, CheckpointWriter::Begin(w->kv_.get(), global_step));
  // A base deleted (or compacted away) since gives a full checkpoint instead.
  w->incremental_ = parent >= 0 && w->writer_->SetParent(parent).ok();
  if (g)
    for (const auto& t : GraphTables(*g)) SF_RETURN_IF_ERROR(w->writer_->AddTable(t.second));
  return w;
}

GraphCheckpointWriter::~GraphCheckpointWriter() {
  // The writer and the store close before the directory's lock is released.
  writer_.reset();
  kv_.reset();
}

Status GraphCheckpointWriter::Add(const std::string& name, const Tensor& value) { return writer_->Add(name, value); }

Status GraphCheckpointWriter::AddRows(const std::string& name, const Tensor& value, const std::vector<int64_t>& rows) {
  if (!incremental_) return Internal("AddRows of '" + name + "' in a full checkpoint");
  return writer_->AddRows(name, value, rows);
}

Result<int64_t> GraphCheckpointWriter::Commit(int keep_last) {
  SF_ASSIGN_OR_RETURN(int64_t id, writer_->Commit());
  if (keep_last > 0) SF_RETURN_IF_ERROR(RetainCheckpoints(kv_.get(), keep_last).status());
  return id;
}

std::unique_ptr<CheckpointService> NewStoreCheckpointService() {
  return std::make_unique<StoreCheckpointService>();
}

Status CheckRelativeCheckpointDir(const std::string& dir) {
  // The one check of every path a node is given (graph/path_attrs.h).
  return CheckRelativePath(dir, "checkpoint directory", "the node's checkpoint root");
}

namespace {

// A node's service for partitions its peers send: their dir names a
// directory under root, so a session can neither write nor read anything
// else the node's user may.
class RootedCheckpointService : public CheckpointService {
 public:
  explicit RootedCheckpointService(std::string root) : root_(std::move(root)) {}

  Result<int64_t> Save(const std::string& dir, int64_t step, const std::vector<std::string>& names,
                       const std::vector<Tensor>& values) override {
    SF_ASSIGN_OR_RETURN(std::string path, Under(dir));
    std::error_code ec;
    std::filesystem::create_directories(path, ec);
    if (ec) return Internal("cannot create checkpoint directory '" + path + "': " + ec.message());
    return inner_.Save(path, step, names, values);
  }
  Result<std::vector<Tensor>> Restore(const std::string& dir, const std::vector<std::string>& names,
                                      int64_t* step) override {
    SF_ASSIGN_OR_RETURN(std::string path, Under(dir));
    return inner_.Restore(path, names, step);
  }

 private:
  Result<std::string> Under(const std::string& dir) const {
    if (root_.empty())
      return FailedPrecondition("checkpoint directory '" + dir +
                                "' refused: this node has no checkpoint root (shardflow node --checkpoint-dir DIR)");
    SF_RETURN_IF_ERROR(CheckRelativeCheckpointDir(dir));
    return root_ + "/" + dir;
  }

  const std::string root_;
  StoreCheckpointService inner_;
};

}  // namespace

std::unique_ptr<CheckpointService> NewRootedCheckpointService(std::string root) {
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  return std::make_unique<RootedCheckpointService>(std::move(root));
}

namespace {

// The checkpoint's values a restore of g needs: all of them, or with `only`
// (from a full checkpoint) just those variables, plus every saved shard of a
// table that `only` touches and that g splits differently (resharding needs
// them). Every block read is checksummed.
Result<std::map<std::string, Tensor>> ReadForGraph(const Graph& g, CheckpointReader& reader,
                                                   const CheckpointInfo& info, const std::set<std::string>* only) {
  if (!only || info.parent >= 0) return reader.ReadAll(info.id);
  std::set<std::string> wanted = *only;
  const auto graph_tables = GraphTables(g);
  for (const CheckpointTable& ct : info.tables) {
    auto gt = graph_tables.find(ct.name);
    if (gt != graph_tables.end() && gt->second.num_shards == ct.num_shards && gt->second.partition == ct.partition)
      continue;
    const std::string prefix = ct.name + "/part_";
    bool touched = false;
    for (const auto& n : *only) touched = touched || n.compare(0, prefix.size(), prefix) == 0;
    if (!touched) continue;
    for (const CheckpointVariable& v : info.variables)
      if (v.name.compare(0, prefix.size(), prefix) == 0) wanted.insert(v.name);
  }
  return ReadNamed(reader, info, wanted);
}

}  // namespace

Result<std::map<std::string, Tensor>> ReadNamed(CheckpointReader& reader, const CheckpointInfo& info,
                                                const std::set<std::string>& names) {
  // An increment holds only changed rows: its values are composed from the chain.
  if (info.parent >= 0) return reader.ReadAll(info.id);
  std::map<std::string, Tensor> out;
  for (const CheckpointVariable& v : info.variables) {
    if (!names.count(v.name)) continue;
    SF_ASSIGN_OR_RETURN(out[v.name], reader.Read(info, v.name));
  }
  return out;
}

Result<CheckpointRead> ReadCheckpoint(const std::string& dir, int64_t id, const CheckpointSelect& select) {
  std::lock_guard<std::mutex> dir_lock(DirMutex(dir));
  SF_ASSIGN_OR_RETURN(auto kv, OpenCheckpointStore(dir, false));
  CheckpointReader reader(kv.get());
  // Every block read is checksummed, so the newest intact checkpoint is
  // found by reading each candidate once, newest first.
  std::vector<int64_t> candidates;
  if (id >= 0) {
    candidates.push_back(id);
  } else {
    SF_ASSIGN_OR_RETURN(candidates, reader.List());
    std::reverse(candidates.begin(), candidates.end());
    if (candidates.empty()) return NotFound("no readable committed checkpoint in '" + dir + "'");
  }
  Result<CheckpointInfo> info = NotFound("unset");
  Result<std::map<std::string, Tensor>> values = NotFound("unset");
  for (int64_t candidate : candidates) {
    id = candidate;
    info = reader.Manifest(id);
    values = info.ok() ? select(reader, *info) : Result<std::map<std::string, Tensor>>(info.status());
    if (values.ok()) break;
  }
  if (!values.ok()) {
    if (candidates.size() > 1) return NotFound("no readable committed checkpoint in '" + dir + "'");
    std::string msg = values.status().message();
    auto prev = reader.LatestReadable(id - 1);
    msg += prev.ok() ? "; checkpoint " + std::to_string(*prev) + " is the previous readable one"
                     : "; no earlier checkpoint is readable";
    return Status(values.status().code(), msg);
  }
  return CheckpointRead{std::move(info).value(), std::move(values).value()};
}

Result<GraphCheckpoint> ReadCheckpointForGraph(const Graph& g, const std::string& dir, int64_t id,
                                               const std::set<std::string>* only) {
  GraphCheckpoint out;
  SF_ASSIGN_OR_RETURN(CheckpointRead read, ReadCheckpoint(dir, id, [&](CheckpointReader& r, const CheckpointInfo& i) {
                        return ReadForGraph(g, r, i, only);
                      }));
  id = read.info.id;
  const CheckpointInfo* info = &read.info;
  std::map<std::string, Tensor>* values = &read.values;
  // Check every graph variable before assigning any, so an error changes nothing.
  std::set<std::string> seen;
  // Sharded tables saved in another layout: their shard variables (and
  // row-shaped slots "<table>/part_<k>/...") are rebuilt row by row.
  const auto graph_tables = GraphTables(g);
  for (const auto& gt : graph_tables) {
    const CheckpointTable* ct = info->FindTable(gt.first);
    if (ct && ct->rows != gt.second.rows)
      return InvalidArgument("embedding table '" + gt.first + "' has " + std::to_string(gt.second.rows) +
                             " rows in the graph but " + std::to_string(ct->rows) + " in checkpoint " +
                             std::to_string(id) + " in '" + dir + "'");
  }
  std::map<std::string, std::vector<Tensor>> resharded;  // by table and slot suffix
  // Hash tables: each shard variable's value is the shard's whole state; a
  // table saved with another shard count has its rows moved by id.
  std::map<std::string, int64_t> hash_tables;  // name -> shards in g
  for (int i = 0; i < g.num_nodes(); ++i) {
    const Node& n = g.node(i);
    auto t = n.op == "VarHandle" ? n.attrs.Get<std::string>("_hash_embedding") : Result<std::string>(NotFound(""));
    if (t.ok()) ++hash_tables[*t];
  }
  std::map<std::string, std::vector<Tensor>> hash_resharded;
  auto restore_hash = [&](const std::string& table, int64_t shards, int64_t k) -> Result<Tensor> {
    const std::string prefix = table + "/part_";
    auto first = values->find(prefix + "0");
    if (first == values->end())
      return NotFound("hash embedding table '" + table + "': variable '" + prefix + "0' is not in checkpoint " +
                      std::to_string(id) + " in '" + dir + "'");
    const int64_t saved = HashStateNumShards(first->second);
    if (saved < 1)
      return DataLoss("hash embedding table '" + table + "': '" + prefix + "0' in checkpoint " + std::to_string(id) +
                      " is not a hash table shard");
    if (saved == shards) {
      auto it = values->find(prefix + std::to_string(k));
      if (it == values->end())
        return NotFound("hash embedding table '" + table + "': variable '" + prefix + std::to_string(k) +
                        "' is not in checkpoint " + std::to_string(id) + " in '" + dir + "'");
      return it->second;
    }
    auto& parts = hash_resharded[table];
    if (parts.empty()) {
      std::vector<Tensor> old;
      for (int64_t j = 0; j < saved; ++j) {
        auto it = values->find(prefix + std::to_string(j));
        if (it == values->end())
          return NotFound("hash embedding table '" + table + "': variable '" + prefix + std::to_string(j) +
                          "' is not in checkpoint " + std::to_string(id) + " in '" + dir + "'");
        old.push_back(it->second);
      }
      auto r = ReshardHashStates(old, shards, table);
      if (!r.ok()) return r.status().WithPrefix("checkpoint " + std::to_string(id));
      parts = std::move(r).value();
    }
    return parts[k];
  };
  auto restore_value = [&](const std::string& name, std::string* table_of) -> Result<Tensor> {
    for (const auto& ht : hash_tables) {
      const std::string prefix = ht.first + "/part_";
      if (name.compare(0, prefix.size(), prefix) != 0) continue;
      const std::string digits = name.substr(prefix.size());
      if (digits.empty() || digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
      *table_of = ht.first;
      const int64_t k = std::stoll(digits);
      if (k >= ht.second) return InvalidArgument("hash embedding table '" + ht.first + "' has no shard " + digits);
      return restore_hash(ht.first, ht.second, k);
    }
    for (const auto& gt : graph_tables) {
      const std::string prefix = gt.first + "/part_";
      if (name.compare(0, prefix.size(), prefix) != 0) continue;
      const size_t found = name.find_first_not_of("0123456789", prefix.size());
      const size_t digits = found == std::string::npos ? name.size() : found;
      const std::string suffix = name.substr(digits);
      // At most 9 digits: the shard number always fits (std::stoll never throws).
      if (digits == prefix.size() || digits - prefix.size() > 9 || (!suffix.empty() && suffix[0] != '/')) continue;
      *table_of = gt.first;
      const CheckpointTable* ct = info->FindTable(gt.first);
      if (!ct || (ct->num_shards == gt.second.num_shards && ct->partition == gt.second.partition)) break;
      const int64_t k = std::stoll(name.substr(prefix.size(), digits - prefix.size()));
      auto& parts = resharded[gt.first + '\n' + suffix];
      if (parts.empty()) {
        std::vector<Tensor> saved;
        for (int64_t j = 0; j < ct->num_shards; ++j) {
          const std::string src = ct->name + "/part_" + std::to_string(j) + suffix;
          auto it = values->find(src);
          if (it == values->end())
            return NotFound("embedding table '" + gt.first + "': variable '" + src + "' is not in checkpoint " +
                            std::to_string(id) + " in '" + dir + "'");
          saved.push_back(it->second);
        }
        if (!saved[0].shape().empty() && saved[0].shape()[0] == TableShardRows(*ct, 0)) {
          auto r = ReshardTableRows(saved, *ct, gt.second);
          if (!r.ok()) return r.status().WithPrefix("checkpoint " + std::to_string(id));
          parts = std::move(r).value();
        } else {
          // Not rows (Adam's beta powers): every new shard takes saved shard 0's.
          parts.assign(static_cast<size_t>(gt.second.num_shards), saved[0]);
        }
      }
      if (k < 0 || k >= static_cast<int64_t>(parts.size()))
        return InvalidArgument("embedding table '" + gt.first + "' has no shard " + std::to_string(k));
      return parts[k];
    }
    auto it = values->find(name);
    if (it == values->end())
      return NotFound("variable '" + name + "' is not in checkpoint " + std::to_string(id) + " in '" + dir + "'");
    return it->second;
  };
  for (int i = 0; i < g.num_nodes(); ++i) {
    const Node& n = g.node(i);
    if (n.op != "VarHandle") continue;
    auto name = n.attrs.Get<std::string>("shared_name");
    auto dtype = n.attrs.Get<DType>("dtype");
    if (!name.ok() || !dtype.ok() || !seen.insert(*name).second) continue;
    if (only && !only->count(*name)) continue;
    auto shape = n.attrs.GetOr<PartialShape>("shape", PartialShape());
    const PartialShape declared = shape.ok() ? *shape : PartialShape();
    std::string table_of;  // the embedding table *name is a shard (or shard slot) of
    SF_ASSIGN_OR_RETURN(Tensor t, restore_value(*name, &table_of));
    const std::string who = (table_of.empty() ? "" : "embedding table '" + table_of + "': ") + "variable '" + *name + "'";
    if (t.dtype() != *dtype)
      return InvalidArgument(who + " is " + DTypeName(*dtype) + " in the graph but " +
                             DTypeName(t.dtype()) + " in checkpoint " + std::to_string(id));
    if (!declared.CompatibleWith(t.shape()))
      return InvalidArgument(who + " has shape " + declared.ToString() +
                             " in the graph but " + ShapeString(t.shape()) + " in checkpoint " + std::to_string(id));
    out.values.push_back(CheckpointValue{*name, *dtype, declared, t});
  }
  out.id = id;
  out.global_step = info->global_step;
  return out;
}

Result<bool> RestoreInPlace(const Graph& g, const std::string& dir, int64_t id, VariableService* vars,
                            int64_t* global_step) {
  if (!vars->CanRefill() || dir.empty()) return false;
  std::lock_guard<std::mutex> dir_lock(DirMutex(dir));
  auto kv = OpenCheckpointStore(dir, false);
  if (!kv.ok()) return false;
  CheckpointReader reader(kv->get());
  if (id < 0) {
    auto latest = reader.LatestCommitted();
    if (!latest.ok()) return false;
    id = *latest;
  }
  auto info = reader.Manifest(id);
  if (!info.ok() || info->parent >= 0) return false;
  for (const auto& gt : GraphTables(g)) {
    const CheckpointTable* ct = info->FindTable(gt.first);
    if (ct && (ct->rows != gt.second.rows || ct->num_shards != gt.second.num_shards ||
               ct->partition != gt.second.partition))
      return false;  // resharded row by row
  }
  struct Target {
    std::string name;
    int64_t var;
    const CheckpointVariable* saved;
  };
  std::vector<Target> targets;
  std::set<std::string> seen;
  for (int i = 0; i < g.num_nodes(); ++i) {
    const Node& n = g.node(i);
    if (n.op != "VarHandle") continue;
    if (n.attrs.Get<std::string>("_hash_embedding").ok()) return false;  // a shard state, deserialized
    auto name = n.attrs.Get<std::string>("shared_name");
    auto dtype = n.attrs.Get<DType>("dtype");
    if (!name.ok() || !dtype.ok() || !seen.insert(*name).second) continue;
    auto shape = n.attrs.GetOr<PartialShape>("shape", PartialShape());
    const PartialShape declared = shape.ok() ? *shape : PartialShape();
    const CheckpointVariable* v = info->Find(*name);
    if (!v || v->stored_rows >= 0 || v->dtype != *dtype || !declared.CompatibleWith(PartialShape(v->shape)))
      return false;
    auto var = vars->Resolve(*name, *dtype, declared);
    if (!var.ok()) return false;
    targets.push_back(Target{*name, *var, v});
  }
  // Every block is checked before any variable changes: a corrupt
  // checkpoint restores nothing (and the full path names the block).
  for (const Target& t : targets)
    if (!reader.CheckVariable(*info, t.name).ok()) return false;
  for (const Target& t : targets) {
    std::promise<Status> filled;
    std::future<Status> done = filled.get_future();
    vars->Refill(
        t.var,
        [&](Tensor* value) -> Status {
          const CheckpointVariable& v = *t.saved;
          // Its own memory when nobody else holds it (a step's snapshot keeps
          // the old value then, and the variable gets a fresh tensor).
          if (!value->valid() || value->dtype() != v.dtype || value->shape() != v.shape || !value->BufferIsUnique())
            *value = Tensor(v.dtype, v.shape);
          Status s = reader.ReadInto(*info, t.name, value);
          if (!s.ok()) *value = Tensor();
          return s;
        },
        [&filled](Status s) { filled.set_value(std::move(s)); });
    Status s = done.get();
    if (!s.ok())
      return s.WithPrefix("restoring checkpoint " + std::to_string(id) + " in '" + dir + "' (every block checked " +
                          "first), variable '" + t.name + "' is uninitialised now");
  }
  if (global_step) *global_step = info->global_step;
  return true;
}

}  // namespace runtime
}  // namespace sf
