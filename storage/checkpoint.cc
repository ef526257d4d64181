#include "storage/checkpoint.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <set>
#include <sstream>
#include <thread>

#include "storage/crc32.h"

namespace sf {
namespace {

constexpr char kPending[] = "pending/";
constexpr char kData[] = "data/";
constexpr char kManifest[] = "manifest/";

std::string IdString(int64_t id) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%020lld", static_cast<long long>(id));
  return buf;
}

std::string BlockKey(int64_t id, const std::string& var, int shard, int64_t block) {
  char tail[48];
  std::snprintf(tail, sizeof(tail), "#%04d#%010lld", shard, static_cast<long long>(block));
  return kData + IdString(id) + "/" + var + tail;
}

// The key of an increment's row indices for one variable.
std::string RowsKey(int64_t id, const std::string& var, int shard) {
  char tail[32];
  std::snprintf(tail, sizeof(tail), "#%04d#rows", shard);
  return kData + IdString(id) + "/" + var + tail;
}

uint32_t Crc(const char* p, size_t n) { return Crc32(p, n); }

std::string Hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%08x", v);
  return buf;
}

std::string Name(int64_t id) { return "checkpoint " + std::to_string(id); }

// Parses the ids after prefix in the keys under it.
Result<std::vector<int64_t>> IdsUnder(KvStore* store, const std::string& prefix) {
  SF_ASSIGN_OR_RETURN(auto keys, store->Keys(prefix));
  std::vector<int64_t> ids;
  for (const auto& k : keys) {
    const std::string rest = k.substr(prefix.size());
    // Ids are non-negative int64s, so always start with '0' when padded to 20
    // digits; anything else is a stray key, and would overflow std::stoll.
    if (rest.size() != 20 || rest[0] != '0' || rest.find_first_not_of("0123456789") != std::string::npos)
      continue;
    ids.push_back(std::stoll(rest));
  }
  return ids;
}

int64_t RowBytes(const CheckpointVariable& v) {
  int64_t row = static_cast<int64_t>(DTypeSize(v.dtype));
  for (size_t i = 1; i < v.shape.size(); ++i) row *= v.shape[i];
  return row;
}

int64_t Rows(const CheckpointVariable& v) { return v.shape.empty() ? 1 : v.shape[0]; }

// The rows the blocks hold: all of them, or an increment's changed ones.
int64_t StoredRows(const CheckpointVariable& v) { return v.stored_rows >= 0 ? v.stored_rows : Rows(v); }

// Variables (or increments) of at least this many bytes are written through
// a KvBulkWriter (for RocksDB: one table file, ingested); smaller ones in
// ordinary batches, since a file and its syncs per small variable cost more
// than the write-ahead log and memtable they skip. Measured on RocksDB: ten
// 64 KiB variables take 2.5x as long in bulk, ten 4 MiB ones about the same;
// two 5 MiB increments take 0.14 s in bulk against 0.21 s (with the flush
// their memtable needs at close).
constexpr int64_t kBulkVariableBytes = int64_t{4} << 20;
// Bulk variables of at least this many bytes are written by two threads,
// each with its own bulk writer for half of the blocks (measured at 1 GiB:
// 10-15% faster on 2 cores).
constexpr int64_t kTwoWriterBytes = int64_t{64} << 20;
// A check pass (reading blocks only to verify them) of a variable that big
// runs this many reads at once: from a cold disk the reads wait on I/O, and
// more in flight kept the virtual disk busier (4 GiB: 4.1 s with 2, 3.2 s
// with 4, 3.0 s with 8). A filling pass is CPU work (checksums, copies, first
// touches) and runs two.
constexpr int64_t kCheckReaders = 6;

// Writes crc32 (little-endian) of p[0, n) and then the bytes to out[0, 4 + n).
void PutChecksummed(const char* p, size_t n, char* out) {
  const uint32_t crc = Crc(p, n);
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>((crc >> (8 * i)) & 0xff);
  if (n) std::memcpy(out + 4, p, n);
}

// crc32 (little-endian) followed by the bytes.
std::string Checksummed(const char* p, size_t n) {
  std::string block(4 + n, '\0');
  PutChecksummed(p, n, &block[0]);
  return block;
}

// The payload of a checksummed value of n bytes; DataLoss prefixed by where.
Status CheckChecksummed(std::string_view block, size_t n, const std::string& where) {
  if (block.size() != n + 4)
    return DataLoss(where + ": block holds " + std::to_string(block.size()) + " bytes, expected " +
                    std::to_string(n + 4));
  uint32_t stored = 0;
  for (int i = 0; i < 4; ++i) stored |= static_cast<uint32_t>(static_cast<unsigned char>(block[i])) << (8 * i);
  const uint32_t actual = Crc(block.data() + 4, n);
  if (stored != actual)
    return DataLoss(where + ": checksum mismatch (stored " + Hex32(stored) + ", computed " + Hex32(actual) +
                    "): the block is corrupt");
  return Status::OK();
}

std::string EncodeManifest(const CheckpointInfo& info) {
  std::ostringstream os;
  os << "sfckpt 2\nid " << info.id << "\nstep " << info.global_step << "\nparent " << info.parent
     << "\ntables " << info.tables.size() << "\n";
  for (const auto& t : info.tables)
    os << "table " << t.name << " " << t.rows << " " << t.num_shards << " " << t.partition << "\n";
  os << "vars " << info.variables.size() << "\n";
  for (const auto& v : info.variables) {
    os << "var " << v.name << " " << DTypeName(v.dtype) << " " << v.shard << " " << v.rows_per_block << " "
       << v.num_blocks << " " << v.stored_rows << " " << v.shape.size();
    for (int64_t d : v.shape) os << " " << d;
    os << "\n";
  }
  std::string body = os.str();
  return body + "crc " + Hex32(Crc(body.data(), body.size())) + "\n";
}

Result<CheckpointInfo> DecodeManifest(int64_t id, const std::string& bytes) {
  auto bad = [&](const std::string& why) {
    return DataLoss(Name(id) + ": manifest is truncated or corrupt (" + why + ")");
  };
  const size_t p = bytes.rfind("crc ");
  if (p == std::string::npos || bytes.size() != p + 13 || bytes.back() != '\n') return bad("no checksum line");
  const std::string body = bytes.substr(0, p);
  if (Hex32(Crc(body.data(), body.size())) != bytes.substr(p + 4, 8)) return bad("checksum mismatch");
  std::istringstream is(body);
  std::string word;
  int version = 0;
  size_t nvars = 0;
  CheckpointInfo info;
  // Version 1 (no parent, tables or increments) is still read.
  if (!(is >> word >> version) || word != "sfckpt" || (version != 1 && version != 2)) return bad("bad header");
  if (!(is >> word >> info.id) || word != "id" || info.id != id) return bad("bad id");
  if (!(is >> word >> info.global_step) || word != "step") return bad("bad step");
  if (version >= 2) {
    size_t ntables = 0;
    if (!(is >> word >> info.parent) || word != "parent" || info.parent < -1 || info.parent >= id)
      return bad("bad parent");
    if (!(is >> word >> ntables) || word != "tables" || ntables > (1u << 20)) return bad("bad table count");
    for (size_t i = 0; i < ntables; ++i) {
      CheckpointTable t;
      if (!(is >> word >> t.name >> t.rows >> t.num_shards >> t.partition) || word != "table" || t.rows < 1 ||
          t.num_shards < 1 || t.num_shards > t.rows || (t.partition != "mod" && t.partition != "range"))
        return bad("bad table entry " + std::to_string(i));
      info.tables.push_back(std::move(t));
    }
  }
  if (!(is >> word >> nvars) || word != "vars") return bad("bad variable count");
  for (size_t i = 0; i < nvars; ++i) {
    CheckpointVariable v;
    std::string dtype;
    size_t rank = 0;
    if (!(is >> word >> v.name >> dtype >> v.shard >> v.rows_per_block >> v.num_blocks) || word != "var" ||
        (version >= 2 && !(is >> v.stored_rows)) || !(is >> rank) || rank > 64)
      return bad("bad variable entry " + std::to_string(i));
    if (v.stored_rows >= 0 && info.parent < 0)
      return bad("variable '" + v.name + "' holds changed rows only, but the checkpoint has no parent");
    auto dt = ParseDType(dtype);
    if (!dt.ok()) return bad("variable '" + v.name + "' has unknown dtype " + dtype);
    v.dtype = *dt;
    v.shape.resize(rank);
    for (auto& d : v.shape)
      if (!(is >> d) || d < 0) return bad("variable '" + v.name + "' has a bad shape");
    // The reader sizes the tensor and walks the blocks from these numbers: an
    // inconsistent entry would allocate absurdly or silently leave rows unread.
    int64_t bytes = static_cast<int64_t>(DTypeSize(v.dtype));
    for (int64_t d : v.shape) {
      if (d != 0 && bytes > (int64_t{1} << 62) / d) return bad("variable '" + v.name + "' is impossibly large");
      bytes *= d;
    }
    if (v.stored_rows < -1 || v.stored_rows > Rows(v))
      return bad("variable '" + v.name + "' stores " + std::to_string(v.stored_rows) + " of " +
                 std::to_string(Rows(v)) + " rows");
    const int64_t rows = StoredRows(v);
    if (v.rows_per_block < 1 || v.num_blocks != (rows + v.rows_per_block - 1) / v.rows_per_block)
      return bad("variable '" + v.name + "' has " + std::to_string(v.num_blocks) + " blocks of " +
                 std::to_string(v.rows_per_block) + " rows for " + std::to_string(rows) + " rows");
    info.variables.push_back(std::move(v));
  }
  return info;
}

}  // namespace

const CheckpointVariable* CheckpointInfo::Find(const std::string& name) const {
  for (const auto& v : variables)
    if (v.name == name) return &v;
  return nullptr;
}

const CheckpointTable* CheckpointInfo::FindTable(const std::string& name) const {
  for (const auto& t : tables)
    if (t.name == name) return &t;
  return nullptr;
}

// ---- writer -----------------------------------------------------------------

Result<std::unique_ptr<CheckpointWriter>> CheckpointWriter::Begin(KvStore* store, int64_t global_step,
                                                                  int64_t block_bytes) {
  SF_ASSIGN_OR_RETURN(auto pending, IdsUnder(store, kPending));
  SF_ASSIGN_OR_RETURN(auto committed, IdsUnder(store, kManifest));
  int64_t next = 1;
  for (int64_t i : pending) next = std::max(next, i + 1);
  for (int64_t i : committed) next = std::max(next, i + 1);
  std::unique_ptr<CheckpointWriter> w(new CheckpointWriter(store, std::max<int64_t>(1, block_bytes)));
  w->info_.id = next;
  w->info_.global_step = global_step;
  SF_RETURN_IF_ERROR(store->Put(kPending + IdString(next), std::to_string(global_step)));
  return w;
}

// Checks name and value for Add/AddRows and fills v's name, dtype and shape.
static Status CheckAdd(const CheckpointInfo& info, bool committed, const std::string& name, const Tensor& value,
                       int shard, CheckpointVariable* v) {
  if (committed) return FailedPrecondition(Name(info.id) + " is already committed");
  if (name.empty() || name.find_first_of(" \t\n\r#") != std::string::npos)
    return InvalidArgument(Name(info.id) + ": variable name '" + name +
                           "' cannot be saved (empty, whitespace or '#')");
  if (!value.valid() || value.dtype() == DType::kResource)
    return InvalidArgument(Name(info.id) + ": variable '" + name + "' has no saveable value");
  for (const auto& e : info.variables)
    if (e.name == name && e.shard == shard)
      return InvalidArgument(Name(info.id) + ": variable '" + name + "' added twice");
  v->name = name;
  v->dtype = value.dtype();
  v->shape = value.shape();
  v->shard = shard;
  return Status::OK();
}

Status CheckpointWriter::WriteBlocks(CheckpointVariable& v, const char* base, int64_t rows) {
  const int64_t row = RowBytes(v);
  v.rows_per_block = std::max<int64_t>(1, row > 0 ? block_bytes_ / row : rows);
  v.num_blocks = rows == 0 ? 0 : (rows + v.rows_per_block - 1) / v.rows_per_block;
  if (rows * row >= kBulkVariableBytes) {
    // Blocks [b0, b1) through one bulk writer (block keys ascend with the
    // block number, as it needs). One buffer serves every block: fresh
    // multi-MiB strings cost a page fault (and zeroing) per 4 KiB.
    auto write_range = [&](int64_t b0, int64_t b1, std::unique_ptr<KvBulkWriter>* out) -> Status {
      SF_ASSIGN_OR_RETURN(auto bulk, store_->NewBulkWriter());
      std::string block;
      for (int64_t b = b0; b < b1; ++b) {
        const int64_t r0 = b * v.rows_per_block, r1 = std::min(rows, r0 + v.rows_per_block);
        const size_t n = static_cast<size_t>((r1 - r0) * row);
        block.resize(4 + n);
        PutChecksummed(base + r0 * row, n, &block[0]);
        SF_RETURN_IF_ERROR(bulk->Put(BlockKey(info_.id, v.name, v.shard, b), block));
      }
      *out = std::move(bulk);  // finished with the others at Commit
      return Status::OK();
    };
    std::unique_ptr<KvBulkWriter> lower_writer, upper_writer;
    if (rows * row < kTwoWriterBytes || v.num_blocks < 2) {
      SF_RETURN_IF_ERROR(write_range(0, v.num_blocks, &lower_writer));
      bulk_.push_back(std::move(lower_writer));
      return Status::OK();
    }
    // Checksums and copies into the page cache keep one core busy while the
    // disk waits: a second writer takes the upper half of the blocks.
    const int64_t mid = v.num_blocks / 2;
    Status upper;
    std::thread t([&] { upper = write_range(mid, v.num_blocks, &upper_writer); });
    Status lower = write_range(0, mid, &lower_writer);
    t.join();
    SF_RETURN_IF_ERROR(lower);
    SF_RETURN_IF_ERROR(upper);
    bulk_.push_back(std::move(lower_writer));
    bulk_.push_back(std::move(upper_writer));
    return Status::OK();
  }
  // Batches of about 64 MiB keep memory bounded for huge tables.
  KvBatch batch;
  size_t batch_bytes = 0;
  for (int64_t b = 0; b < v.num_blocks; ++b) {
    const int64_t r0 = b * v.rows_per_block, r1 = std::min(rows, r0 + v.rows_per_block);
    const size_t n = static_cast<size_t>((r1 - r0) * row);
    batch.Put(BlockKey(info_.id, v.name, v.shard, b), Checksummed(base + r0 * row, n));
    batch_bytes += n;
    if (batch_bytes >= (64u << 20)) {
      SF_RETURN_IF_ERROR(store_->Write(batch, false));
      batch = KvBatch();
      batch_bytes = 0;
    }
  }
  if (!batch.puts.empty()) SF_RETURN_IF_ERROR(store_->Write(batch, false));
  return Status::OK();
}

Status CheckpointWriter::Add(const std::string& name, const Tensor& value, int shard) {
  CheckpointVariable v;
  SF_RETURN_IF_ERROR(CheckAdd(info_, committed_, name, value, shard, &v));
  SF_RETURN_IF_ERROR(WriteBlocks(v, static_cast<const char*>(value.raw_data()), Rows(v)));
  info_.variables.push_back(std::move(v));
  return Status::OK();
}

Status CheckpointWriter::SetParent(int64_t parent) {
  if (committed_ || !info_.variables.empty())
    return FailedPrecondition(Name(info_.id) + ": the parent must be set before any variable is added");
  auto bytes = store_->Get(kManifest + IdString(parent));
  if (!bytes.ok() || parent >= info_.id)
    return NotFound(Name(info_.id) + ": parent checkpoint " + std::to_string(parent) + " is not committed");
  info_.parent = parent;
  return Status::OK();
}

Status CheckpointWriter::AddRows(const std::string& name, const Tensor& value, const std::vector<int64_t>& rows,
                                 int shard) {
  CheckpointVariable v;
  SF_RETURN_IF_ERROR(CheckAdd(info_, committed_, name, value, shard, &v));
  if (info_.parent < 0)
    return InvalidArgument(Name(info_.id) + ": variable '" + name +
                           "': changed rows need a parent checkpoint (SetParent)");
  if (v.shape.empty()) return InvalidArgument(Name(info_.id) + ": scalar variable '" + name + "' has no rows");
  const int64_t total = Rows(v), row = RowBytes(v);
  for (size_t i = 0; i < rows.size(); ++i)
    if (rows[i] < 0 || rows[i] >= total || (i > 0 && rows[i] <= rows[i - 1]))
      return InvalidArgument(Name(info_.id) + ": variable '" + name + "': row " + std::to_string(rows[i]) +
                             " is out of range [0, " + std::to_string(total) + ") or not sorted and unique");
  v.stored_rows = static_cast<int64_t>(rows.size());
  // Gathers the changed rows: one contiguous copy of a small fraction.
  std::string gathered(static_cast<size_t>(v.stored_rows * row), '\0');
  const char* base = static_cast<const char*>(value.raw_data());
  for (size_t i = 0; i < rows.size(); ++i)
    if (row) std::memcpy(&gathered[i * row], base + rows[i] * row, static_cast<size_t>(row));
  SF_RETURN_IF_ERROR(WriteBlocks(v, gathered.data(), v.stored_rows));
  if (!rows.empty()) {
    const std::string idx = Checksummed(reinterpret_cast<const char*>(rows.data()), rows.size() * sizeof(int64_t));
    SF_RETURN_IF_ERROR(store_->Put(RowsKey(info_.id, name, shard), idx));
  }
  info_.variables.push_back(std::move(v));
  return Status::OK();
}

Status CheckpointWriter::AddTable(const CheckpointTable& t) {
  if (t.name.empty() || t.name.find_first_of(" \t\n\r#") != std::string::npos || t.rows < 1 ||
      t.num_shards < 1 || t.num_shards > t.rows || (t.partition != "mod" && t.partition != "range"))
    return InvalidArgument(Name(info_.id) + ": embedding table '" + t.name + "' cannot be recorded (" +
                           std::to_string(t.rows) + " rows, " + std::to_string(t.num_shards) +
                           " shards, partition '" + t.partition + "')");
  info_.tables.push_back(t);
  return Status::OK();
}

Result<int64_t> CheckpointWriter::Commit() {
  if (committed_) return FailedPrecondition(Name(info_.id) + " is already committed");
  // Bulk-written blocks are durable once ingested (RocksDB syncs the files
  // and its MANIFEST first), all in one step: before the manifest below.
  SF_RETURN_IF_ERROR(store_->FinishBulk(&bulk_).WithPrefix(Name(info_.id)));
  // The synced manifest write also makes every earlier unsynced block write
  // durable (one write-ahead log, written in order).
  KvBatch b;
  b.Put(kManifest + IdString(info_.id), EncodeManifest(info_));
  b.Delete(kPending + IdString(info_.id));
  SF_RETURN_IF_ERROR(store_->Write(b, true));
  committed_ = true;
  return info_.id;
}

// ---- reader -----------------------------------------------------------------

Result<std::vector<int64_t>> CheckpointReader::List() {
  SF_ASSIGN_OR_RETURN(auto ids, IdsUnder(store_, kManifest));
  std::sort(ids.begin(), ids.end());
  return ids;
}

Result<CheckpointInfo> CheckpointReader::Manifest(int64_t id) {
  auto bytes = store_->Get(kManifest + IdString(id));
  if (!bytes.ok()) {
    if (bytes.status().code() == Code::kNotFound) return NotFound(Name(id) + " is not committed");
    return bytes.status();
  }
  return DecodeManifest(id, *bytes);
}

Result<int64_t> CheckpointReader::LatestCommitted() {
  SF_ASSIGN_OR_RETURN(auto ids, List());
  for (auto it = ids.rbegin(); it != ids.rend(); ++it)
    if (Manifest(*it).ok()) return *it;
  return NotFound("no committed checkpoint");
}

Result<Tensor> CheckpointReader::Read(const CheckpointInfo& info, const std::string& name,
                                      std::vector<int64_t>* rows_out) {
  const CheckpointVariable* v = info.Find(name);
  if (!v) return NotFound(Name(info.id) + " has no variable '" + name + "'");
  if (v->stored_rows >= 0 && !rows_out)
    return InvalidArgument(Name(info.id) + ": variable '" + name +
                           "' holds changed rows only (an increment): read it with ReadAll");
  Shape shape = v->shape;
  if (v->stored_rows >= 0) shape[0] = v->stored_rows;
  Tensor t(v->dtype, shape);
  SF_RETURN_IF_ERROR(ReadBlocks(info, *v, static_cast<char*>(t.raw_data())));
  if (v->stored_rows >= 0) {
    rows_out->assign(static_cast<size_t>(v->stored_rows), 0);
    if (v->stored_rows > 0) {
      const std::string where = What(info, *v) + ", row indices";
      auto idx = store_->Get(RowsKey(info.id, name, v->shard));
      if (!idx.ok()) {
        if (idx.status().code() == Code::kNotFound) return DataLoss(where + ": block is missing");
        return idx.status().WithPrefix(where);
      }
      SF_RETURN_IF_ERROR(CheckChecksummed(*idx, rows_out->size() * sizeof(int64_t), where));
      std::memcpy(rows_out->data(), idx->data() + 4, rows_out->size() * sizeof(int64_t));
      const int64_t total = Rows(*v);
      for (size_t i = 0; i < rows_out->size(); ++i)
        if ((*rows_out)[i] < 0 || (*rows_out)[i] >= total)
          return DataLoss(where + ": row " + std::to_string((*rows_out)[i]) + " is out of range");
    }
  }
  return t;
}

std::string CheckpointReader::What(const CheckpointInfo& info, const CheckpointVariable& v) {
  return Name(info.id) + (info.parent >= 0 ? " (an increment on " + Name(info.parent) + ")" : "") + ", variable '" +
         v.name + "', shard " + std::to_string(v.shard);
}

Status CheckpointReader::ReadBlocks(const CheckpointInfo& info, const CheckpointVariable& v, char* base) {
  const int64_t row = RowBytes(v), rows = StoredRows(v);
  const std::string what = What(info, v);
  // Blocks [b0, b1) into base through one reused buffer (a fresh
  // multi-MiB string per block cost a page fault per 4 KiB).
  auto read_range = [&](int64_t b0, int64_t b1) -> Status {
    std::string scratch;
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t r0 = b * v.rows_per_block, r1 = std::min(rows, r0 + v.rows_per_block);
      const size_t n = static_cast<size_t>((r1 - r0) * row);
      bool checked = false;  // the error is the block check's own (it names the block)
      Status s = store_->ReadValue(BlockKey(info.id, v.name, v.shard, b), &scratch, [&](std::string_view block) {
        const std::string where = what + ", block " + std::to_string(b);
        Status c = CheckChecksummed(block, n, where);
        if (!c.ok()) {
          checked = true;
          return c;
        }
        if (n && base) std::memcpy(base + r0 * row, block.data() + 4, n);
        return Status::OK();
      });
      if (s.code() == Code::kNotFound) return DataLoss(what + ", block " + std::to_string(b) + ": block is missing");
      // The store's own failure (a damaged file is DataLoss, I/O Unavailable).
      if (!s.ok() && !checked) return s.WithPrefix(what + ", block " + std::to_string(b));
      SF_RETURN_IF_ERROR(s);
    }
    return Status::OK();
  };
  if (rows * row < kTwoWriterBytes || v.num_blocks < 2) return read_range(0, v.num_blocks);
  // Checksums and copies out of the page cache (and a fresh tensor's first
  // touch of its pages) are CPU work: two threads fill; a check waits on the
  // disk more than it computes, so it keeps more reads in flight.
  const int64_t parts = std::min<int64_t>(v.num_blocks, base ? 2 : kCheckReaders);
  std::vector<Status> part_status(static_cast<size_t>(parts));
  std::vector<std::thread> threads;
  for (int64_t p = 1; p < parts; ++p)
    threads.emplace_back([&, p] {
      part_status[p] = read_range(v.num_blocks * p / parts, v.num_blocks * (p + 1) / parts);
    });
  part_status[0] = read_range(0, v.num_blocks / parts);
  for (std::thread& t : threads) t.join();
  for (const Status& s : part_status) SF_RETURN_IF_ERROR(s);
  return Status::OK();
}

Status CheckpointReader::CheckVariable(const CheckpointInfo& info, const std::string& name) {
  const CheckpointVariable* v = info.Find(name);
  if (!v) return NotFound(Name(info.id) + " has no variable '" + name + "'");
  return ReadBlocks(info, *v, nullptr);
}

Status CheckpointReader::ReadInto(const CheckpointInfo& info, const std::string& name, Tensor* dest) {
  const CheckpointVariable* v = info.Find(name);
  if (!v) return NotFound(Name(info.id) + " has no variable '" + name + "'");
  if (v->stored_rows >= 0)
    return InvalidArgument(Name(info.id) + ": variable '" + name + "' holds changed rows only (an increment)");
  if (!dest->valid() || dest->dtype() != v->dtype || dest->shape() != v->shape)
    return InvalidArgument(Name(info.id) + ": variable '" + name + "' is " + DTypeName(v->dtype) + " " +
                           ShapeString(v->shape) + ", not the tensor given to read it into");
  return ReadBlocks(info, *v, static_cast<char*>(dest->raw_data()));
}

Result<std::vector<CheckpointInfo>> CheckpointReader::Chain(int64_t id) {
  std::vector<CheckpointInfo> chain;
  SF_ASSIGN_OR_RETURN(CheckpointInfo info, Manifest(id));
  chain.push_back(std::move(info));
  while (chain.back().parent >= 0) {
    const int64_t child = chain.back().id, parent = chain.back().parent;
    auto p = Manifest(parent);
    if (!p.ok())
      return DataLoss(Name(child) + " is an increment on " + Name(parent) + ", which is unreadable: " +
                      p.status().message());
    chain.push_back(std::move(p).value());
  }
  std::reverse(chain.begin(), chain.end());
  return chain;
}

Result<std::map<std::string, Tensor>> CheckpointReader::ReadAll(int64_t id) {
  SF_ASSIGN_OR_RETURN(auto chain, Chain(id));
  std::map<std::string, Tensor> out;
  for (const CheckpointInfo& info : chain) {
    std::map<std::string, Tensor> next;
    for (const auto& v : info.variables) {
      if (v.stored_rows < 0) {
        SF_ASSIGN_OR_RETURN(Tensor t, Read(info, v.name));
        next[v.name] = std::move(t);
        continue;
      }
      // Changed rows over the parent's value of the same dtype and shape.
      auto prev = out.find(v.name);
      if (prev == out.end() || prev->second.dtype() != v.dtype || prev->second.shape() != v.shape)
        return DataLoss(Name(info.id) + ": variable '" + v.name + "' holds changed rows of a " +
                        ShapeString(v.shape) + " value that " + Name(info.parent) + " does not have");
      std::vector<int64_t> rows;
      SF_ASSIGN_OR_RETURN(Tensor changed, Read(info, v.name, &rows));
      Tensor t = std::move(prev->second);
      const size_t row = static_cast<size_t>(RowBytes(v));
      char* dst = static_cast<char*>(t.raw_data());
      const char* src = static_cast<const char*>(changed.raw_data());
      for (size_t i = 0; i < rows.size(); ++i)
        if (row) std::memcpy(dst + rows[i] * row, src + i * row, row);
      next[v.name] = std::move(t);
    }
    // Variables the newest manifest does not list are gone.
    out = std::move(next);
  }
  return out;
}

Status CheckpointReader::Verify(int64_t id) { return ReadAll(id).status(); }

Result<int64_t> CheckpointReader::LatestReadable(int64_t max_id, std::vector<Status>* skipped) {
  SF_ASSIGN_OR_RETURN(auto ids, List());
  for (auto it = ids.rbegin(); it != ids.rend(); ++it) {
    if (max_id >= 0 && *it > max_id) continue;
    Status s = Verify(*it);
    if (s.ok()) return *it;
    if (skipped) skipped->push_back(s);
  }
  return NotFound("no readable committed checkpoint");
}

Status DeleteCheckpoint(KvStore* store, int64_t id) {
  SF_RETURN_IF_ERROR(store->Delete(kManifest + IdString(id), true));
  SF_RETURN_IF_ERROR(store->DeletePrefix(kData + IdString(id) + "/"));
  return store->Delete(kPending + IdString(id));
}

Result<std::vector<int64_t>> RetainCheckpoints(KvStore* store, int keep_last) {
  CheckpointReader reader(store);
  SF_ASSIGN_OR_RETURN(auto ids, reader.List());
  SF_ASSIGN_OR_RETURN(auto pending, IdsUnder(store, kPending));
  std::vector<int64_t> doomed;
  const int keep = std::max(0, keep_last);
  // Kept: the newest keep, and every ancestor a kept increment composes over.
  std::set<int64_t> kept;
  for (size_t i = ids.size() > static_cast<size_t>(keep) ? ids.size() - keep : 0; i < ids.size(); ++i) {
    for (int64_t id = ids[i]; id >= 0 && kept.insert(id).second;) {
      auto info = reader.Manifest(id);
      id = info.ok() ? info->parent : -1;
    }
  }
  for (int64_t id : ids)
    if (!kept.count(id)) doomed.push_back(id);
  // A pending checkpoint older than the newest commit is an abandoned write.
  if (!ids.empty())
    for (int64_t p : pending)
      if (p < ids.back()) doomed.push_back(p);
  std::sort(doomed.begin(), doomed.end());
  for (int64_t id : doomed) SF_RETURN_IF_ERROR(DeleteCheckpoint(store, id));
  return doomed;
}

Result<int64_t> CompactCheckpoint(KvStore* store, int64_t id, int64_t block_bytes) {
  CheckpointReader reader(store);
  SF_ASSIGN_OR_RETURN(CheckpointInfo info, reader.Manifest(id));
  SF_ASSIGN_OR_RETURN(auto values, reader.ReadAll(id));
  SF_ASSIGN_OR_RETURN(auto writer, CheckpointWriter::Begin(store, info.global_step, block_bytes));
  for (const auto& t : info.tables) SF_RETURN_IF_ERROR(writer->AddTable(t));
  for (const auto& v : info.variables) SF_RETURN_IF_ERROR(writer->Add(v.name, values[v.name], v.shard));
  return writer->Commit();
}

}  // namespace sf
