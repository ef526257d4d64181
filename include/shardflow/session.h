// Session: runs a graph on the embedded in-process actor runtime.
//
// The session starts a CAF actor system; a coordinator actor prunes the graph
// to what the fetches need, places and partitions it over
// SessionOptions::num_cpu_devices CPU devices and hands
// each partition to a partition actor; variables live in variable shard
// actors, which keep their values between runs.
// Thread-safety: Run may be called from many threads at once; each call is
// one step with its own id.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "shardflow/graph.h"
#include "shardflow/run_args.h"

namespace sf {

class KernelRegistry;

struct SessionOptions {
  int compute_threads = 0;    // compute pool size; 0 = one per core
  int scheduler_threads = 0;  // CAF scheduler threads; 0 = 2
  // CPU devices "/job:localhost/task:0/device:CPU:i" the graph is placed and
  // partitioned over (DeviceScope requests them); 1 keeps one partition.
  int num_cpu_devices = 1;
  // The kernels partitions are built from; null: StandardKernelRegistry().
  // A program with ops of its own passes a registry holding the standard
  // kernels and its own (shardflow/kernel.h), and builds its graph over an
  // OpRegistry holding their ops (shardflow/op_registry.h). Must outlive the
  // session.
  const KernelRegistry* kernels = nullptr;
  // The largest tensor an op may allocate; past it the step fails with
  // ResourceExhausted naming the node, and the process goes on. 0: the
  // machine's physical memory.
  int64_t max_tensor_bytes = 0;
  // The clock of the session's chunk queue leases (milliseconds, any
  // origin; kernels/chunk_leases.h); null: the steady clock. Tests pass one
  // they move by hand to end a lease without waiting for it.
  std::function<int64_t()> chunk_queue_clock_ms;
};

// What every session kind offers (the in-process Session, ClusterSession in
// shardflow/cluster.h): programs written against it run either way. A kind
// implements StartRun and graph(); Run and RunAsync are built on them once.
class SessionInterface {
 public:
  virtual ~SessionInterface() = default;
  // Runs one step: feeds placeholders (keys: Outputs or names), computes the
  // fetches (Outputs or tensor names) and runs the targets (Operations,
  // Outputs' nodes or node names), e.g. Run({{x, batch}}, {loss}, {train}).
  // Returns one tensor per fetch, or the first error: a missing or wrongly
  // typed feed, an unknown name, an object of another graph, a graph cycle,
  // or a kernel failure naming its op and node.
  Result<std::vector<Tensor>> Run(const FeedMap& feeds, const Fetches& fetches, const Targets& targets = {});
  // Run with options (a trace file, shardflow/run_args.h) after the
  // targets; errors as Run, or Unavailable naming the trace file when it
  // cannot be written.
  Result<std::vector<Tensor>> Run(const FeedMap& feeds, const Fetches& fetches, const Targets& targets,
                                  const RunOptions& options);
  // The same, returning at once; done runs on a runtime thread with the
  // result (it must not block on another Run).
  void RunAsync(const FeedMap& feeds, const Fetches& fetches, const Targets& targets,
                std::function<void(Result<std::vector<Tensor>>)> done);
  // RunAsync with options; errors as Run with options.
  void RunAsync(const FeedMap& feeds, const Fetches& fetches, const Targets& targets, const RunOptions& options,
                std::function<void(Result<std::vector<Tensor>>)> done);
  // The graph the session runs.
  virtual const Graph& graph() const = 0;
  // Ends the steps waiting on the session's queues (Aborted, and so is every
  // later queue request), as TensorFlow's Session.close() cancels pending
  // steps: what a closing owner calls before it lets go, when other threads
  // may still run steps. The session itself lives on until its last owner
  // destroys it. Sessions without queues of their own do nothing.
  virtual void CancelWaits() {}
  // Checkpoints every initialised variable (and optimizer slot) into the
  // RocksDB store in dir under global_step, then keeps the newest keep_last
  // checkpoints (<= 0: all). Returns the id; Unavailable naming dir (or the
  // cluster member) on failure.
  virtual Result<int64_t> SaveCheckpoint(const std::string& dir, int64_t global_step, int keep_last = 0) = 0;
  // SaveCheckpoint writing only what changed since this session's previous
  // save into dir (a full checkpoint when there is no such base); errors as
  // SaveCheckpoint. Saver (shardflow/checkpoint.h) calls these.
  virtual Result<int64_t> SaveIncrementalCheckpoint(const std::string& dir, int64_t global_step,
                                                    int keep_last = 0) = 0;
  // Assigns the graph's variables from checkpoint id in dir (-1: the newest
  // readable one); errors as Session::Restore.
  virtual Status RestoreCheckpoint(const std::string& dir, int64_t id = -1, int64_t* global_step = nullptr) = 0;

 protected:
  // Starts one step of feeds, fetches and targets, all named in graph()
  // (RunAsync resolved them), run as options say; done as for RunAsync.
  virtual void StartRun(const RunOptions& options, NamedFeeds feeds, std::vector<std::string> fetches,
                        std::vector<std::string> targets, std::function<void(Result<std::vector<Tensor>>)> done) = 0;
};

// When a training loop checkpoints: every every_steps steps and/or every
// every_seconds seconds since the last checkpoint (<= 0 turns a measure off).
class CheckpointSchedule {
 public:
  CheckpointSchedule(int64_t every_steps, double every_seconds);
  // True when a checkpoint is due after global step `step` (and restarts the
  // clock, taking it as done).
  bool Due(int64_t step);

 private:
  int64_t every_steps_;
  double every_seconds_;
  int64_t last_step_ = -1;  // the step of the last checkpoint taken
  double last_time_;        // seconds on a steady clock
};

class Session : public SessionInterface {
 public:
  // REQUIRES: g outlives the session and is not modified while it runs.
  explicit Session(const Graph& g, SessionOptions options = {});
  ~Session() override;
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Run and RunAsync come from SessionInterface; RunAsync's done must not
  // block on another Run (that would hold a compute thread).
  const Graph& graph() const override;
  void CancelWaits() override;
  // SessionInterface's checkpoints: Save (plus retention) and Restore.
  Result<int64_t> SaveCheckpoint(const std::string& dir, int64_t global_step, int keep_last = 0) override;
  Result<int64_t> SaveIncrementalCheckpoint(const std::string& dir, int64_t global_step, int keep_last = 0) override;
  Status RestoreCheckpoint(const std::string& dir, int64_t id = -1, int64_t* global_step = nullptr) override {
    return Restore(dir, id, global_step);
  }

  // Checkpoints every initialised variable and optimizer slot into the
  // RocksDB store in directory dir (created if needed) under global_step;
  // each variable shard answers with a consistent snapshot of its variables,
  // and the checkpoint becomes visible when its manifest commits. Returns
  // the new checkpoint id; Unavailable naming dir if the store fails.
  // Every save also restarts the changed-row record SaveIncremental uses.
  Result<int64_t> Save(const std::string& dir, int64_t global_step);
  // Save writing only what changed since this session's previous save into
  // dir: rows touched by sparse (embedding) updates, and whole variables
  // that were assigned or densely updated. The checkpoint is an increment on
  // that previous one; without one (first save, other dir, restored since, a
  // failed save) it is a full checkpoint. Errors as for Save.
  Result<int64_t> SaveIncremental(const std::string& dir, int64_t global_step);
  // Assigns the graph's variables (and slots) from checkpoint id in dir
  // (-1: the newest committed checkpoint that reads back intact, falling
  // back past corrupt ones). Nothing is assigned on error: NotFound when dir
  // has no checkpoint or the checkpoint lacks a graph variable, DataLoss
  // naming checkpoint, variable and block for a corrupt one (and the
  // previous readable id), InvalidArgument naming the variable whose dtype or
  // shape differs from the graph's. When global_step is given it receives the
  // restored checkpoint's global step (after any fallback). An increment is
  // composed over its chain. A sharded embedding table saved with K shards
  // restores into the graph's K' shards (or other partitioning): its rows
  // (and row-shaped slots) move to their new shards; a table whose row count
  // or width differs is InvalidArgument naming the table.
  Status Restore(const std::string& dir, int64_t id = -1, int64_t* global_step = nullptr);
  // The global step recorded in checkpoint id (-1: newest committed) in dir;
  // NotFound when there is none.
  static Result<int64_t> CheckpointStep(const std::string& dir, int64_t id = -1);
  // Folds checkpoint id (-1: newest committed) and the increments it builds
  // on into a new full checkpoint in dir; returns its id. Errors as for
  // Restore (DataLoss naming a corrupt checkpoint of the chain).
  static Result<int64_t> CompactCheckpoint(const std::string& dir, int64_t id = -1);

  struct Impl;

 protected:
  void StartRun(const RunOptions& options, NamedFeeds feeds, std::vector<std::string> fetches,
                std::vector<std::string> targets, std::function<void(Result<std::vector<Tensor>>)> done) override;

 private:
  std::unique_ptr<Impl> impl_;
};

// The embedded, in-process runtime is the only kind today; the name says so
// where a program wants to be explicit about it.
using LocalSession = Session;

}  // namespace sf
