#include "storage/kv_store.h"

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <map>
#include <mutex>

#include <rocksdb/convenience.h>
#include <rocksdb/db.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/memtablerep.h>
#include <rocksdb/options.h>
#include <rocksdb/slice_transform.h>
#include <rocksdb/table.h>
#include <rocksdb/sst_file_reader.h>
#include <rocksdb/sst_file_writer.h>
#include <rocksdb/write_batch.h>

namespace sf {

Result<std::vector<std::string>> KvStore::Keys(const std::string& prefix) {
  std::vector<std::string> keys;
  SF_RETURN_IF_ERROR(Scan(prefix, [&](const std::string& k, const std::string&) {
    keys.push_back(k);
    return true;
  }));
  return keys;
}

namespace {

// RocksDB's failures as ours: damaged files are DataLoss (retrying cannot
// help), the rest Unavailable (I/O, locks, space).
Code CodeOf(const rocksdb::Status& s) { return s.IsCorruption() ? Code::kDataLoss : Code::kUnavailable; }

// KvStore's default bulk writer: unsynced batches of about 64 MiB through
// Write, so memory stays bounded for huge variables.
class BatchedBulkWriter : public KvBulkWriter {
 public:
  explicit BatchedBulkWriter(KvStore* store) : store_(store) {}
  Status Put(const std::string& key, std::string_view value) override {
    if (finished_) return FailedPrecondition("bulk write of '" + key + "' after Finish");
    if (!last_.empty() && key <= last_)
      return InvalidArgument("bulk write: key '" + key + "' does not sort after '" + last_ + "'");
    last_ = key;
    batch_.Put(key, std::string(value));
    bytes_ += value.size();
    if (bytes_ >= (64u << 20)) return Flush();
    return Status::OK();
  }
  Status Finish() override {
    if (finished_) return FailedPrecondition("bulk writer finished twice");
    finished_ = true;
    return Flush();
  }

 private:
  Status Flush() {
    Status s = batch_.puts.empty() ? Status::OK() : store_->Write(batch_, false);
    batch_ = KvBatch();
    bytes_ = 0;
    return s;
  }
  KvStore* store_;
  KvBatch batch_;
  size_t bytes_ = 0;
  std::string last_;
  bool finished_ = false;
};

class InMemoryKvStore : public KvStore {
 public:
  Status Write(const KvBatch& batch, bool sync) override {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& kv : batch.puts) data_[kv.first] = kv.second;
    for (const auto& k : batch.deletes) data_.erase(k);
    return Status::OK();
  }
  Result<std::string> Get(const std::string& key) override {
    std::lock_guard<std::mutex> l(mu_);
    auto it = data_.find(key);
    if (it == data_.end()) return NotFound("no key '" + key + "'");
    return it->second;
  }
  Status ReadValue(const std::string& key, std::string* scratch,
                   const std::function<Status(std::string_view)>& fn) override {
    {
      std::lock_guard<std::mutex> l(mu_);
      auto it = data_.find(key);
      if (it == data_.end()) return NotFound("no key '" + key + "'");
      scratch->assign(it->second);  // a copy: fn runs unlocked and may write to the store
    }
    return fn(*scratch);
  }
  Status ScanFrom(const std::string& prefix, const std::string& from,
                  const std::function<bool(const std::string&, const std::string&)>& fn) override {
    // Copy first: fn may write to the store.
    std::vector<std::pair<std::string, std::string>> hits;
    {
      std::lock_guard<std::mutex> l(mu_);
      for (auto it = data_.lower_bound(std::max(prefix, from)); it != data_.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it)
        hits.push_back(*it);
    }
    for (const auto& kv : hits)
      if (!fn(kv.first, kv.second)) break;
    return Status::OK();
  }

 private:
  std::mutex mu_;
  std::map<std::string, std::string> data_;  // GUARDED_BY(mu_)
};

// Prefix of the table files bulk writers build inside the database folder
// before ingesting them; RocksDB ignores (and never deletes) such names, so
// leftovers of a killed writer are removed when the store opens.
constexpr char kBulkFilePrefix[] = "sf_bulk_";

// Writes the puts into one table file with RocksDB's SstFileWriter and
// ingests it at Finish: the bytes hit the disk once, with no write-ahead log,
// memtable or compaction. Ingestion syncs the file and RocksDB's own
// MANIFEST before it returns, so the keys are durable then, and a later
// synced write (a checkpoint manifest) can never be durable without them.
class RocksBulkWriter : public KvBulkWriter {
 public:
  RocksBulkWriter(rocksdb::DB* db, std::string db_path, std::string file)
      : db_(db), db_path_(std::move(db_path)), file_(std::move(file)) {}
  ~RocksBulkWriter() override {
    // An abandoned (or failed) writer leaves no file behind.
    if (!finished_) {
      writer_.reset();
      std::error_code ec;
      std::filesystem::remove(file_, ec);
    }
  }
  Status Put(const std::string& key, std::string_view value) override {
    if (finished_) return FailedPrecondition("bulk write of '" + key + "' after Finish");
    if (!last_.empty() && key <= last_)
      return InvalidArgument("bulk write: key '" + key + "' does not sort after '" + last_ + "'");
    if (!writer_) {
      rocksdb::Options o = db_->GetOptions();
      // Checkpoint blocks are float data that block compression barely
      // shrinks; trying costs CPU at every block.
      o.compression = rocksdb::kNoCompression;
      // The written pages stay in the page cache (reclaimable): the usual
      // restore is a recovery soon after the save, and with the pages
      // dropped (SstFileWriter's default) it read 4 GiB back from disk
      // (restore 0.44-0.88 of the save's rate; 1.0-1.44 with them kept).
      writer_ = std::make_unique<rocksdb::SstFileWriter>(rocksdb::EnvOptions(), o, /*column_family=*/nullptr,
                                                         /*invalidate_page_cache=*/false);
      rocksdb::Status s = writer_->Open(file_);
      if (!s.ok()) return Error("create bulk file '" + file_ + "' in", s);
    }
    last_ = key;
    rocksdb::Status s = writer_->Put(key, rocksdb::Slice(value.data(), value.size()));
    if (!s.ok()) return Error("bulk write of '" + key + "' to", s);
    return Status::OK();
  }
  Status Finish() override {
    std::string file;
    SF_RETURN_IF_ERROR(CloseFile(&file));
    if (file.empty()) return Status::OK();
    return Ingest(db_, db_path_, {file});
  }
  // Finishes the table file without ingesting it: *file is its path, or empty
  // when nothing was put. The writer counts as finished (Ingest takes over).
  // Unavailable on a write failure.
  Status CloseFile(std::string* file) {
    if (finished_) return FailedPrecondition("bulk writer finished twice");
    file->clear();
    if (!writer_) {
      finished_ = true;
      return Status::OK();
    }
    rocksdb::Status s = writer_->Finish();
    if (!s.ok()) return Error("finish bulk file '" + file_ + "' in", s);
    writer_.reset();
    finished_ = true;
    *file = file_;
    return Status::OK();
  }
  // Ingests finished table files in one step (their key ranges must not
  // overlap: each holds other variables or other blocks), then removes our
  // names of them; on failure the files are removed too. Unavailable on failure.
  static Status Ingest(rocksdb::DB* db, const std::string& db_path, const std::vector<std::string>& files) {
    rocksdb::IngestExternalFileOptions io;
    io.move_files = true;  // a hard link, not a copy
    // The sequence number lives in RocksDB's MANIFEST; writing it into the
    // file too would rewrite part of a file just synced.
    io.write_global_seqno = false;
    rocksdb::Status s = db->IngestExternalFile(files, io);
    // move_files hard-links the files into the database; drop our names.
    std::error_code ec;
    for (const auto& f : files) std::filesystem::remove(f, ec);
    if (!s.ok())
      return Status(Code::kUnavailable, "RocksDB ingest of " + std::to_string(files.size()) + " bulk file(s) into '" +
                                            db_path + "' failed: " + s.ToString());
    return Status::OK();
  }

 private:
  Status Error(const std::string& what, const rocksdb::Status& s) const {
    return Status(CodeOf(s), "RocksDB " + what + " '" + db_path_ + "' failed: " + s.ToString());
  }
  rocksdb::DB* db_;
  const std::string db_path_, file_;
  std::unique_ptr<rocksdb::SstFileWriter> writer_;
  std::string last_;
  bool finished_ = false;
};

// A memtable at least this big is flushed when the store closes.
constexpr uint64_t kFlushAtCloseBytes = uint64_t{16} << 20;

class RocksKvStore : public KvStore {
 public:
  Status MultiGet(const std::vector<std::string>& keys, std::vector<std::string>* values,
                  std::vector<bool>* found) override {
    // The batched form: one pass over the memtable and each table file for
    // all the keys (the vector form is a Get per key).
    const size_t n = keys.size();
    std::vector<rocksdb::Slice> slices(keys.begin(), keys.end());
    std::vector<rocksdb::PinnableSlice> pinned(n);
    std::vector<rocksdb::Status> st(n);
    // Keys given in order need not be sorted again (RocksDB sorts them by
    // string comparisons, a cost of its own for thousands of keys).
    const bool sorted = std::is_sorted(keys.begin(), keys.end());
    db_->MultiGet(rocksdb::ReadOptions(), db_->DefaultColumnFamily(), n, slices.data(), pinned.data(), st.data(),
                  sorted);
    values->assign(n, std::string());
    found->assign(n, false);
    for (size_t i = 0; i < n; ++i) {
      if (st[i].IsNotFound()) continue;
      if (!st[i].ok()) return Error("read from", st[i]);
      (*values)[i].assign(pinned[i].data(), pinned[i].size());
      (*found)[i] = true;
    }
    return Status::OK();
  }
  int64_t DiskBytes() override {
    uint64_t sst = 0;
    db_->GetIntProperty(rocksdb::DB::Properties::kTotalSstFilesSize, &sst);
    // Unflushed writes are on disk in the log too, except in a cache, which
    // keeps none: its memtables are memory.
    return static_cast<int64_t>(sst) + (use_ == RocksDbUse::kCache ? 0 : MemtableBytes());
  }
  int64_t MemtableBytes() {
    uint64_t mem = 0;
    db_->GetIntProperty(rocksdb::DB::Properties::kCurSizeAllMemTables, &mem);
    return static_cast<int64_t>(mem);
  }
  Status ScanSome(const std::string& prefix, std::string* cursor, int64_t max_keys,
                  const std::function<void(const std::string&, const std::string&)>& fn) override {
    // The cursor: a table file's number (8 bytes, big-endian) and the last
    // key read from it. Files compacted away meanwhile are skipped; their
    // keys are in newer files, which come later.
    uint64_t file = 0;
    std::string after;
    if (cursor->size() >= 8) {
      for (int i = 0; i < 8; ++i) file = (file << 8) | static_cast<unsigned char>((*cursor)[i]);
      after = cursor->substr(8);
    }
    std::vector<rocksdb::LiveFileMetaData> files;
    db_->GetLiveFilesMetaData(&files);
    std::sort(files.begin(), files.end(), [](const auto& a, const auto& b) { return a.file_number < b.file_number; });
    const rocksdb::Options options = db_->GetOptions();
    int64_t seen = 0;
    for (const rocksdb::LiveFileMetaData& f : files) {
      if (f.file_number < file) continue;
      rocksdb::SstFileReader reader(options);
      if (!reader.Open(f.directory + "/" + f.relative_filename).ok()) continue;  // compacted away
      rocksdb::ReadOptions ro;
      ro.total_order_seek = true;
      ro.fill_cache = false;
      std::unique_ptr<rocksdb::Iterator> it(reader.NewIterator(ro));
      const bool resume = f.file_number == file && !after.empty();
      if (!resume) after.clear();  // a key of the cursor's file, gone by now, or of the last file
      it->Seek(resume ? std::max(prefix, after) : prefix);
      if (resume && it->Valid() && it->key() == rocksdb::Slice(after)) it->Next();  // read last time
      for (; it->Valid() && it->key().starts_with(prefix); it->Next()) {
        if (seen++ == max_keys) {
          std::string c(8, '\0');
          for (int i = 7, n = 0; i >= 0; --i, ++n) c[i] = static_cast<char>((f.file_number >> (8 * n)) & 0xff);
          *cursor = c + after;
          return Status::OK();
        }
        after = it->key().ToString();
        fn(after, it->value().ToString());
      }
      if (!it->status().ok()) return Error("scan a table file of", it->status());
    }
    cursor->clear();
    return Status::OK();
  }

 public:
  RocksKvStore(std::string path, rocksdb::DB* db, RocksDbUse use) : path_(std::move(path)), db_(db), use_(use) {}
  ~RocksKvStore() override {
    // Without a flush the next open replays the write-ahead log (measured:
    // 0.6 s for a 256 MiB checkpoint), which would dominate a small
    // incremental save that reopens the store. A small log (an increment's
    // row indices and manifest: bulk-written blocks skip it) replays in
    // milliseconds, less than the flush's table file and syncs cost at every
    // save. Best effort: the log stays either way.
    // A cache is emptied when it is opened again: flushing it is wasted work.
    uint64_t memtable = 0;
    db_->GetIntProperty(rocksdb::DB::Properties::kCurSizeAllMemTables, &memtable);
    if (use_ == RocksDbUse::kCheckpoints && memtable >= kFlushAtCloseBytes) db_->Flush(rocksdb::FlushOptions());
    db_->Close();
    delete db_;
  }
  Status Write(const KvBatch& batch, bool sync) override {
    rocksdb::WriteBatch wb;
    for (const auto& kv : batch.puts) wb.Put(kv.first, kv.second);
    for (const auto& k : batch.deletes) wb.Delete(k);
    rocksdb::WriteOptions wo;
    wo.sync = sync;
    // A cache's writes need not survive a crash; logging them would copy
    // every demoted row a second time, into the log file.
    wo.disableWAL = use_ == RocksDbUse::kCache && !sync;
    rocksdb::Status s = db_->Write(wo, &wb);
    if (!s.ok()) return Error("write to", s);
    return Status::OK();
  }
  Result<std::string> Get(const std::string& key) override {
    std::string v;
    rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), key, &v);
    if (s.IsNotFound()) return NotFound("no key '" + key + "' in " + path_);
    if (!s.ok()) return Error("read from", s);
    return v;
  }
  Status ScanFrom(const std::string& prefix, const std::string& from,
                  const std::function<bool(const std::string&, const std::string&)>& fn) override {
    rocksdb::ReadOptions ro;
    // A cache's hashed memtable iterates in key order only when asked to.
    ro.total_order_seek = true;
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro));
    for (it->Seek(std::max(prefix, from)); it->Valid() && it->key().starts_with(prefix); it->Next())
      if (!fn(it->key().ToString(), it->value().ToString())) break;
    if (!it->status().ok()) return Error("scan", it->status());
    return Status::OK();
  }
  Status DeletePrefix(const std::string& prefix) override {
    // The end of the range: the prefix with its last byte below 0xff
    // incremented (and what follows dropped).
    std::string end = prefix;
    while (!end.empty() && static_cast<unsigned char>(end.back()) == 0xff) end.pop_back();
    if (end.empty()) return KvStore::DeletePrefix(prefix);
    end.back() = static_cast<char>(static_cast<unsigned char>(end.back()) + 1);
    // Table files wholly inside the range (bulk-written ones are) go at
    // once: a range tombstone alone would keep their space until compactions
    // reach the bottom level they were ingested into, which may be never.
    const rocksdb::Slice b(prefix), e(end);
    rocksdb::Status s = rocksdb::DeleteFilesInRange(db_, db_->DefaultColumnFamily(), &b, &e, /*include_end=*/false);
    if (!s.ok()) return Error("delete files of '" + prefix + "' in", s);
    rocksdb::WriteBatch wb;
    s = wb.DeleteRange(b, e);
    if (s.ok()) s = db_->Write(rocksdb::WriteOptions(), &wb);
    if (!s.ok()) return Error("delete range '" + prefix + "' in", s);
    return Status::OK();
  }
  Result<std::unique_ptr<KvBulkWriter>> NewBulkWriter() override {
    const std::string file = path_ + "/" + kBulkFilePrefix + std::to_string(next_bulk_++) + ".sst";
    return std::unique_ptr<KvBulkWriter>(std::make_unique<RocksBulkWriter>(db_, path_, file));
  }
  Status FinishBulk(std::vector<std::unique_ptr<KvBulkWriter>>* writers) override {
    std::vector<std::string> files;
    for (auto& w : *writers) {
      auto* rw = dynamic_cast<RocksBulkWriter*>(w.get());
      if (!rw) {  // not one of ours: finish it alone
        SF_RETURN_IF_ERROR(w->Finish());
        continue;
      }
      std::string file;
      Status st = rw->CloseFile(&file);
      if (!st.ok()) {  // closed files are no writer's any more: remove them
        std::error_code ec;
        for (const auto& f : files) std::filesystem::remove(f, ec);
        return st;
      }
      if (!file.empty()) files.push_back(std::move(file));
    }
    writers->clear();
    if (files.empty()) return Status::OK();
    return RocksBulkWriter::Ingest(db_, path_, files);
  }
  Status ReadValue(const std::string& key, std::string* scratch,
                   const std::function<Status(std::string_view)>& fn) override {
    rocksdb::PinnableSlice value(scratch);
    rocksdb::ReadOptions ro;
    // A checkpoint's blocks are read once: caching them would only evict
    // what others use.
    ro.fill_cache = false;
    rocksdb::Status s = db_->Get(ro, db_->DefaultColumnFamily(), key, &value);
    if (s.IsNotFound()) return NotFound("no key '" + key + "' in " + path_);
    if (!s.ok()) return Error("read from", s);
    return fn(std::string_view(value.data(), value.size()));
  }

 private:
  Status Error(const std::string& what, const rocksdb::Status& s) const {
    return Status(CodeOf(s), "RocksDB " + what + " '" + path_ + "' failed: " + s.ToString());
  }
  const std::string path_;
  rocksdb::DB* db_;
  const RocksDbUse use_;
  std::atomic<uint64_t> next_bulk_{0};
};

}  // namespace

Status KvStore::DeletePrefix(const std::string& prefix) {
  SF_ASSIGN_OR_RETURN(auto keys, Keys(prefix));
  KvBatch b;
  for (auto& k : keys) b.Delete(std::move(k));
  return Write(b, false);
}

Result<std::unique_ptr<KvBulkWriter>> KvStore::NewBulkWriter() {
  return std::unique_ptr<KvBulkWriter>(std::make_unique<BatchedBulkWriter>(this));
}

Status KvStore::FinishBulk(std::vector<std::unique_ptr<KvBulkWriter>>* writers) {
  for (auto& w : *writers) SF_RETURN_IF_ERROR(w->Finish());
  writers->clear();
  return Status::OK();
}

Status KvStore::ReadValue(const std::string& key, std::string* scratch,
                          const std::function<Status(std::string_view)>& fn) {
  SF_ASSIGN_OR_RETURN(*scratch, Get(key));
  return fn(*scratch);
}

Status KvStore::ScanSome(const std::string& prefix, std::string* cursor, int64_t max_keys,
                         const std::function<void(const std::string&, const std::string&)>& fn) {
  int64_t seen = 0;
  std::string next;
  SF_RETURN_IF_ERROR(ScanFrom(prefix, std::max(prefix, *cursor), [&](const std::string& k, const std::string& v) {
    if (seen++ == max_keys) {
      next = k;
      return false;
    }
    fn(k, v);
    return true;
  }));
  *cursor = next;
  return Status::OK();
}

Status KvStore::MultiGet(const std::vector<std::string>& keys, std::vector<std::string>* values,
                         std::vector<bool>* found) {
  values->assign(keys.size(), std::string());
  found->assign(keys.size(), false);
  for (size_t i = 0; i < keys.size(); ++i) {
    auto v = Get(keys[i]);
    if (v.ok()) {
      (*values)[i] = std::move(*v);
      (*found)[i] = true;
    } else if (v.status().code() != Code::kNotFound) {
      return v.status();
    }
  }
  return Status::OK();
}

std::unique_ptr<KvStore> NewInMemoryKvStore() { return std::make_unique<InMemoryKvStore>(); }

Result<std::unique_ptr<KvStore>> OpenRocksDb(const std::string& path, bool create_if_missing, RocksDbUse use) {
  rocksdb::Options options;
  options.create_if_missing = create_if_missing;
  if (use == RocksDbUse::kCache) {
    // The skip list memtable was half a cold tier's time (perf): every put,
    // delete and point read walks ~log2(memtable entries) cache-missing
    // nodes. Hashing whole keys (a cold tier's are 9 bytes; the capped
    // transform keeps shorter keys in its domain) makes them about constant
    // time; the memtable is sorted only when flushed or scanned.
    options.prefix_extractor.reset(rocksdb::NewCappedPrefixTransform(9));
    options.memtable_factory.reset(rocksdb::NewHashLinkListRepFactory(/*bucket_count=*/1 << 18));
    options.allow_concurrent_memtable_write = false;  // the hashed memtables cannot
    // Most misses are new ids: a Bloom filter answers them without a block read.
    rocksdb::BlockBasedTableOptions table;
    table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
    options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
    options.compression = rocksdb::kNoCompression;  // float rows barely compress
    // Else RocksDB flushes unlogged writes at close, which a cache never reads.
    options.avoid_flush_during_shutdown = true;
  }
  // A write-ahead log left by a close without flush (a small memtable, see
  // ~RocksKvStore) is replayed into the memtable and kept, not flushed into
  // a table file at open: that flush (a file, its syncs and a new MANIFEST)
  // would move the cost skipped at close to every open.
  options.avoid_flush_during_recovery = true;
  // A torn last record (a crash mid-save) is dropped; damage anywhere else
  // fails the open as DataLoss. Point-in-time recovery stopped quietly at
  // the first bad record of an old log and dropped every later one, so the
  // newer checkpoints vanished and their ids were handed out again.
  if (use != RocksDbUse::kCache) options.wal_recovery_mode = rocksdb::WALRecoveryMode::kTolerateCorruptedTailRecords;
  rocksdb::DB* db = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(options, path, &db);
  if (!s.ok())
    return Status(CodeOf(s), "cannot open checkpoint store '" + path + "': " + s.ToString());
  // The database is locked now: bulk files still here belong to a writer
  // that died before ingesting them.
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(path, ec))
    if (e.path().filename().string().rfind(kBulkFilePrefix, 0) == 0) std::filesystem::remove(e.path(), ec);
  return std::unique_ptr<KvStore>(std::make_unique<RocksKvStore>(path, db, use));
}

Result<std::unique_ptr<KvStore>> OpenCheckpointStore(const std::string& dir, bool create) {
  if (dir.empty()) return InvalidArgument("checkpoint directory is empty");
  std::error_code ec;
  if (!create && !std::filesystem::exists(std::filesystem::path(dir) / "CURRENT", ec))
    return NotFound("no checkpoint store in '" + dir + "'");
  auto kv = OpenRocksDb(dir, create);
  if (!kv.ok() && kv.status().code() == Code::kDataLoss)
    return DataLoss("the checkpoint store in '" + dir + "' is damaged: " + kv.status().message());
  if (!kv.ok() && !create) return NotFound("no checkpoint store in '" + dir + "': " + kv.status().message());
  return kv;
}

}  // namespace sf
