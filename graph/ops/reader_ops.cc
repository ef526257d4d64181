// Reader ops: CriteoReader (kernels/cpu/reader_kernels.cc) and the builders
// of include/shardflow/reader_ops.h over it and the queue ops.
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>

#include "graph/op_registry.h"
#include "kernels/criteo_format.h"
#include "kernels/criteo_reader.h"
#include "shardflow/queue_ops.h"
#include "shardflow/reader_ops.h"

namespace sf {

Status RegisterReaderOps(OpRegistry& reg) {
  const CriteoReaderOptions d;
  return reg.Register(OpBuilder("CriteoReader")
      .RequiredAttr<std::string>("files").Path(PathAttr::kDataFiles)
      .Attr("batch_size", d.batch_size).Attr("num_threads", int64_t{d.num_threads})
      .Attr("prefetch_batches", d.prefetch_batches).Attr("on_malformed", "skip")
      .Attr("max_line_bytes", d.max_line_bytes).Attr("chunk_bytes", d.chunk_bytes)
      .Attr("num_epochs", d.num_epochs)
      .Inputs(0).Stateful()
      .Shape([](InferenceContext& c) -> Status {
        SF_ASSIGN_OR_RETURN(std::string files, c.Attr<std::string>("files"));
        if (auto f = SplitCriteoFiles(files); !f.ok()) return c.Error(f.status().message());
        if (auto o = CriteoReaderOptionsFromAttrs(c.attrs()); !o.ok()) return c.Error(o.status().message());
        c.set_output(0, DType::kFloat32, PartialShape(Shape{-1}));
        c.set_output(1, DType::kFloat32, PartialShape(Shape{-1, kCriteoDense}));
        c.set_output(2, DType::kInt64, PartialShape(Shape{-1, kCriteoCategorical}));
        c.set_output(3, DType::kInt64, PartialShape(Shape{}));
        return Status::OK();
      })
      .NotDifferentiable()
      .Summary("Reads Criteo-format files (attr files, one per line; plain or gzip TSV) on num_threads reader "
               "threads, prefetch_batches ahead; each run outputs one batch: label [n], dense [n, 13] "
               "(log(1 + x)), categorical [n, 26] (int64 ids hashed with their field), and the count of "
               "malformed lines skipped so far (on_malformed skip) or fails naming file and line (fail). "
               "OutOfRange after num_epochs passes.")
      .Build());
}

namespace ops {

CriteoColumns CriteoReader(Graph& g, const std::vector<std::string>& files, const CriteoReaderOptions& options,
                           const std::string& name) {
  std::string joined;
  for (const std::string& f : files) {
    if (f.empty() || f.find('\n') != std::string::npos) {
      g.RecordError(InvalidArgument("CriteoReader '" + name + "': a file name is empty or holds a newline"));
      return {};
    }
    joined += (joined.empty() ? "" : "\n") + f;
  }
  AttrMap a;
  a.Set("files", joined);
  CriteoReaderOptionsToAttrs(options, &a);
  const int id = g.AddNode("CriteoReader", {}, std::move(a), name);
  if (id < 0) return {};
  return {Output(&g, id, 0), Output(&g, id, 1), Output(&g, id, 2), Output(&g, id, 3)};
}

CriteoInput CriteoBatchQueue(Graph& g, const std::vector<std::string>& files, const CriteoReaderOptions& options,
                             int64_t batch_size, int64_t capacity, const std::string& name) {
  if (batch_size < 1 || batch_size > std::numeric_limits<int32_t>::max()) {
    g.RecordError(InvalidArgument("CriteoBatchQueue '" + name + "': batch_size must be in [1, 2^31), got " +
                                  std::to_string(batch_size)));
    return {};
  }
  if (capacity <= 0) capacity = 4 * std::max(batch_size, options.batch_size);
  CriteoColumns cols = CriteoReader(g, files, options, name + "/reader");
  if (!cols.label.valid()) return {};
  QueueOptions qo;
  qo.shapes = {PartialShape(Shape{}), PartialShape(Shape{kCriteoDense}), PartialShape(Shape{kCriteoCategorical})};
  qo.capacity = capacity;
  Output q = FIFOQueue(g, {DType::kFloat32, DType::kFloat32, DType::kInt64}, qo, name + "/queue");
  CriteoInput in;
  in.enqueue = QueueEnqueueMany(g, q, {cols.label, cols.dense, cols.categorical}, 0, name + "/enqueue");
  in.close = QueueClose(g, q, false, name + "/close");
  in.cancel = QueueClose(g, q, true, name + "/cancel");
  std::vector<Output> batch = QueueDequeueUpTo(g, q, batch_size, 0, name + "/dequeue");
  if (batch.size() != 3 || !in.enqueue.valid() || !in.close.valid() || !in.cancel.valid()) return {};
  in.label = batch[0];
  in.dense = batch[1];
  in.categorical = batch[2];
  return in;
}

Result<std::vector<std::string>> CriteoFiles(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return NotFound("cannot list the data directory '" + dir + "'");
  std::vector<std::string> files;
  while (const dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    const std::string path = dir + "/" + e->d_name;
    struct stat st;
    if (::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) files.push_back(path);
  }
  ::closedir(d);
  if (files.empty()) return NotFound("the data directory '" + dir + "' holds no file");
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace ops
}  // namespace sf
