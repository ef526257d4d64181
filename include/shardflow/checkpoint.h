// Checkpoints from a program: a Saver that writes a session's checkpoints
// into one directory and keeps the newest few, for the local Session and a
// ClusterSession alike, and CheckpointDir to look inside a directory.
//
//   sf::Saver saver(&session, "/ckpt", /*keep_last=*/3);
//   SF_ASSIGN_OR_RETURN(int64_t id, saver.Save(step));          // all variables
//   SF_RETURN_IF_ERROR(saver.Restore());                         // the newest readable
//   SF_ASSIGN_OR_RETURN(auto dir, sf::CheckpointDir::Open("/ckpt"));
//   SF_ASSIGN_OR_RETURN(auto info, dir->Describe(id));           // step, variables
//
// The checkpoints are RocksDB stores of checksummed row blocks; a checkpoint
// exists once its manifest commits (docs/USER_GUIDE.md, "Checkpoints").
// Thread-safety: a Saver may be used from one thread at a time; CheckpointDir
// methods may be called from many threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "shardflow/session.h"
#include "shardflow/status.h"
#include "shardflow/tensor.h"

namespace sf {

// Saves a session's checkpoints to one directory and keeps only the newest
// keep_last of them (keep_last <= 0 keeps all).
class Saver {
 public:
  // REQUIRES: session outlives the saver.
  Saver(SessionInterface* session, std::string dir, int keep_last = 5)
      : session_(session), dir_(std::move(dir)), keep_last_(keep_last) {}
  // Writes every variable (and slot), then deletes checkpoints beyond
  // keep_last; the new id, or the first error (naming the directory).
  Result<int64_t> Save(int64_t global_step) { return session_->SaveCheckpoint(dir_, global_step, keep_last_); }
  // Writes what changed since the session's previous save (a full
  // checkpoint when there is no base; a ClusterSession always writes full
  // ones), then retention as for Save; an increment's base and intermediate
  // increments are kept while it is.
  Result<int64_t> SaveIncremental(int64_t global_step) {
    return session_->SaveIncrementalCheckpoint(dir_, global_step, keep_last_);
  }
  // Assigns the graph's variables from checkpoint id (-1: the newest
  // readable one); errors as Session::Restore.
  Status Restore(int64_t id = -1, int64_t* global_step = nullptr) {
    return session_->RestoreCheckpoint(dir_, id, global_step);
  }

 private:
  SessionInterface* session_;
  std::string dir_;
  int keep_last_;
};

// A checkpoint directory opened for reading.
class CheckpointDir {
 public:
  struct Variable {
    std::string name;
    DType dtype = DType::kInvalid;
    Shape shape;
    int64_t blocks = 0;  // checksummed row blocks stored
  };
  struct Summary {
    int64_t id = -1;
    int64_t global_step = 0;
    int64_t parent = -1;  // the checkpoint this one is an increment on; -1: full
    std::vector<Variable> variables;
  };
  // Opens dir; NotFound naming it when it holds no checkpoint store.
  static Result<std::unique_ptr<CheckpointDir>> Open(const std::string& dir);
  ~CheckpointDir();
  // Every checkpoint id with a manifest, oldest first (readable or not).
  Result<std::vector<int64_t>> List() const;
  // The newest committed id; NotFound when there is none.
  Result<int64_t> Latest() const;
  // Checkpoint id's manifest; DataLoss for a corrupt one, NotFound for none.
  Result<Summary> Describe(int64_t id) const;
  // Reads every block of checkpoint id and checks its checksum; DataLoss
  // naming the variable and block otherwise.
  Status Verify(int64_t id) const;
  // One variable's value in checkpoint id (increments composed over their
  // chain); NotFound naming it, DataLoss for a corrupt block.
  Result<Tensor> Read(int64_t id, const std::string& name) const;

  struct Impl;

 private:
  explicit CheckpointDir(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace sf
