// ChunkLeases: which chunks of an input each worker trains, so that every
// example is trained once per epoch while workers come and go. A pure state
// machine: time is passed in (now_ms), nothing here waits, sleeps or sends;
// the chunk queue actor (actors/chunk_queue_actor.h) drives it.
//
//   ChunkLeases q(ChunkLeaseOptions{/*num_chunks=*/8, /*num_epochs=*/1, /*lease_ms=*/30000});
//   ChunkTicket t;
//   if (q.Take(worker, now, &t) == ChunkLeases::Took::kTicket) {
//     // read chunk t.chunk from line t.skip + 1; after each trained step:
//     q.Trained(worker, t.ticket, pos_of_the_last_trained_row, now);
//     // after the chunk's last line was read:
//     q.Read(worker, t.ticket, pos_of_its_last_row, now);   // done once trained up to it
//   }
//
// A ticket is one chunk in one epoch (its index, epoch * num_chunks + chunk,
// in the low kChunkTicketBits bits) handed out once: the bits above hold the
// hand-out's number (mod 2^kChunkHandoutBits), so rows a worker read before
// it lost a chunk are refused even once it holds the chunk again (it reads
// the chunk again from after its trained rows; the old rows would be
// trained twice), except a report repeated by its worker (a step run
// again) of a ticket that finished or was taken back from it since. Tickets are handed out in order; one a worker held when it was released
// (Release: the worker is gone) or whose lease expired is handed out again
// before any new one, from the line after the last one trained (skip), so
// every line of every epoch is trained once. Positions are 1-based line
// numbers within the chunk (malformed lines count: they are skipped the same
// way every time).
//
// Leases: every call of a worker renews all its leases for lease_ms. A
// worker that calls nothing for lease_ms loses its tickets at the next
// Expire (or any call with a later now). A report for a ticket the worker
// no longer holds is refused (FailedPrecondition naming the chunk): the
// rows it trained since are trained twice, which it must stop doing; so is
// a report for a finished ticket (its holder's last report finished it).
//
// Serialize and Restore carry the whole state to another process (the
// chunk queue's task moved, or its backup took over): a version that grows
// with every change says which of two states is newer.
//
// Thread-compatible: one owner (the actor) calls it.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "shardflow/status.h"

namespace sf {

// A ticket's bits: the index below kChunkTicketBits, the hand-out's number
// in the kChunkHandoutBits above it (the chunk queue's incarnation is above
// both, kernels/chunk_queue_service.h).
constexpr int kChunkTicketBits = 40;
constexpr int kChunkHandoutBits = 8;
// The ticket's index (epoch * num_chunks + chunk) without the bits above it.
constexpr int64_t ChunkTicketIndex(int64_t ticket) { return ticket & ((int64_t{1} << kChunkTicketBits) - 1); }

struct ChunkLeaseOptions {
  int64_t num_chunks = 0;    // chunks of one epoch, 1..2^40
  int64_t num_epochs = 1;    // passes over the chunks; <= 0: endless
  int64_t lease_ms = 30000;  // a silent worker loses its tickets after this long, 1..2^40
};

// Checks options; InvalidArgument naming the field.
Status ValidateChunkLeaseOptions(const ChunkLeaseOptions& o);

// One chunk handed to a worker: train its lines after line `skip`.
struct ChunkTicket {
  int64_t ticket = -1;
  int64_t chunk = -1;
  int64_t epoch = -1;
  int64_t skip = 0;
};

struct ChunkLeaseStats {
  int64_t handed = 0;    // tickets handed out (again ones included)
  int64_t returned = 0;  // tickets taken back from released or expired workers
  int64_t done = 0;      // tickets read to their end and trained up to their last row
  int64_t refused = 0;   // reports refused (lease lost)
};

class ChunkLeases {
 public:
  enum class Took { kTicket, kWait, kEnd };

  // REQUIRES: ValidateChunkLeaseOptions(o).ok().
  explicit ChunkLeases(ChunkLeaseOptions o);

  // Expires leases as of now_ms, then hands `worker` a ticket (kTicket, *t
  // set): a returned one first, else the next new one. kWait when none is
  // free but some held ticket may still come back; kEnd when every ticket
  // of every epoch is done. reader (non-zero): what the worker reads its
  // chunks into (its row queue's incarnation); a Take naming another one
  // than the worker's earlier Takes first takes back the tickets it holds,
  // whose rows went with that queue (its slot moved, its node died), so
  // they are read again at once rather than when its lease would end.
  Took Take(int64_t worker, int64_t now_ms, ChunkTicket* t, int64_t reader = 0);
  // The worker trained the rows of `ticket` up to line pos. FailedPrecondition
  // naming the chunk when it does not hold the ticket (or it is done);
  // InvalidArgument for a ticket never handed out.
  Status Trained(int64_t worker, int64_t ticket, int64_t pos, int64_t now_ms);
  // Trained for each of tickets (with pos[i]), all or none: the first
  // refusal, and nothing recorded. A step's rows may span chunks, and the
  // step applies its update only when its report is taken (a chunk recorded
  // trained while the step failed on another would lose rows). On a
  // refusal the worker's other chunks of the report go back too (handed
  // out again after their trained rows; its later rows of them refused):
  // the batch it drops left a hole in them. InvalidArgument when the sizes
  // differ.
  Status TrainedAll(int64_t worker, const std::vector<int64_t>& tickets, const std::vector<int64_t>& pos,
                    int64_t now_ms);
  // The worker read `ticket`'s chunk to its end; last_pos: the line of its
  // last row (0: none). Errors as Trained.
  Status Read(int64_t worker, int64_t ticket, int64_t last_pos, int64_t now_ms);
  // The worker is gone: its tickets are handed out again. How many.
  int64_t Release(int64_t worker);
  // The worker reads its chunks into `reader` from now on (Take): the
  // tickets it holds go back (Release) when it named another one before.
  // How many went back.
  int64_t ReadsInto(int64_t worker, int64_t reader);
  // Takes back the tickets of workers silent for lease_ms as of now_ms; how many.
  int64_t Expire(int64_t now_ms);
  // When the earliest lease ends (ms, the clock of now_ms); -1 when none is held.
  int64_t NextExpiry() const;
  // True when no ticket is free but one is held (a Take would wait).
  bool Waiting() const;
  const ChunkLeaseStats& stats() const { return stats_; }
  const ChunkLeaseOptions& options() const { return o_; }
  // "chunk C of epoch E", for errors (any ticket of the chunk and epoch).
  std::string Describe(int64_t ticket) const;
  // Grows with every change of the state (a ticket handed out, a report
  // taken or refused, a ticket taken back); a renewed lease is no change.
  int64_t version() const { return version_; }

  // The whole state (options, version, tickets, workers, stats) as int64
  // words; worker lease ends are left out (another process's clock).
  std::vector<int64_t> Serialize() const;
  // A queue in the state words[0, n) of Serialize, every holder's lease
  // starting again at now_ms (leases do not travel between clocks).
  // InvalidArgument naming what is wrong when the words are no such state
  // (they come from the network: sizes, ranges, tickets and holders are all
  // checked) or its options are not `options`.
  static Result<ChunkLeases> Restore(const int64_t* words, size_t n, const ChunkLeaseOptions& options,
                                     int64_t now_ms);

 private:
  struct Open {
    int64_t holder = -1;    // -1: free (returned)
    int64_t handout = 0;    // times handed out again (mod 2^kChunkHandoutBits in tickets)
    int64_t trained = 0;    // line of the last trained row
    int64_t last = -1;      // line of the last row read (-1: not read to the end yet)
  };
  // The open ticket held by worker, renewing its leases; null after setting *s.
  Open* Held(int64_t worker, int64_t ticket, int64_t now_ms, Status* s);
  void Renew(int64_t worker, int64_t now_ms);
  // Done once read to its end and trained up to its last row: forgotten,
  // but for the record in finished_.
  void MaybeDone(int64_t ticket);
  // True when worker's report of `ticket` up to pos repeats one taken
  // before the ticket finished or was taken back from it (a step run again
  // after it failed past its report).
  bool RepeatsFinish(int64_t worker, int64_t ticket, int64_t pos) const;
  // Notes that worker's hand-out `ticket` ended (done, or taken back) trained up to pos.
  void RecordSettled(int64_t ticket, int64_t worker, int64_t pos);
  // Frees the open ticket `index` to be handed out again (its holder's set is the caller's).
  void Return(int64_t index);
  void ReturnAll(int64_t worker);

  ChunkLeaseOptions o_;  // not const: Restore's result is moved
  int64_t version_ = 0;
  int64_t next_ = 0;                       // the next ticket never handed out
  std::map<int64_t, Open> open_;           // tickets handed out and not done
  std::set<int64_t> free_;                 // open tickets to hand out again
  struct Worker {
    int64_t expires_ms = 0;
    int64_t reader = 0;  // of its Takes (0: none named)
    std::set<int64_t> tickets;
  };
  std::unordered_map<int64_t, Worker> workers_;  // workers holding tickets
  ChunkLeaseStats stats_;
  // The last kMaxFinished hand-outs ended (with their hand-out bits): done,
  // or taken back from a released or expired worker; their last holder and
  // the line trained to when they ended. A step of that worker run again
  // after it failed past its report (the session runs it again when the
  // cluster moved a part of it, or the queue's node died) repeats the
  // report: it is taken as a no-op instead of refused, so the step's
  // update runs once and its rows, counted trained, are not dropped.
  // A run again repeats one batch's report, so the last few per worker are
  // what counts; the state is written and replicated at every change, so it
  // stays small (at most 6 KiB of these records).
  static constexpr size_t kMaxFinished = 256;
  struct Finished {
    int64_t worker = -1;
    int64_t pos = 0;
  };
  std::map<int64_t, Finished> finished_;
  std::deque<int64_t> finished_order_;
};

}  // namespace sf
