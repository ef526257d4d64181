// ChunkLeases, the state machine behind the chunk queue: tickets once per
// epoch over several workers, a released or silent worker's chunk resumed by
// another after its trained rows, refused reports, and a property test of
// "every line trained exactly once per epoch" over seeded runs with workers
// dying at random. Time is a number the test moves.
#include <catch2/catch.hpp>

#include <map>
#include <random>
#include <vector>

#include "kernels/chunk_leases.h"

using namespace sf;
using Took = ChunkLeases::Took;

TEST_CASE("ChunkLeases: tickets go out once per epoch, in order, over several workers", "[chunk_leases]") {
  ChunkLeases q(ChunkLeaseOptions{3, 2, 1000});
  std::vector<int64_t> handed;
  ChunkTicket t;
  for (int i = 0; i < 6; ++i) {
    REQUIRE(q.Take(i % 2, 0, &t) == Took::kTicket);
    CHECK(t.chunk == i % 3);
    CHECK(t.epoch == i / 3);
    CHECK(t.skip == 0);
    handed.push_back(t.ticket);
  }
  CHECK(handed == std::vector<int64_t>{0, 1, 2, 3, 4, 5});
  CHECK(q.Take(7, 0, &t) == Took::kWait);  // all out, none done: one may come back
  CHECK(q.Waiting());
  for (int64_t k : handed) {
    REQUIRE(q.Trained(k % 2, k, 10, 1).ok());
    REQUIRE(q.Read(k % 2, k, 10, 1).ok());
  }
  CHECK(q.stats().done == 6);
  CHECK(q.Take(7, 2, &t) == Took::kEnd);
  CHECK(q.NextExpiry() == -1);
}

TEST_CASE("ChunkLeases: a chunk is done once read to its end and trained up to its last row, in either order",
          "[chunk_leases]") {
  ChunkLeases q(ChunkLeaseOptions{2, 1, 1000});
  ChunkTicket a, b;
  REQUIRE(q.Take(1, 0, &a) == Took::kTicket);
  REQUIRE(q.Take(1, 0, &b) == Took::kTicket);
  REQUIRE(q.Trained(1, a.ticket, 7, 0).ok());
  CHECK(q.stats().done == 0);  // the end of the chunk is not known yet
  REQUIRE(q.Read(1, a.ticket, 7, 0).ok());
  CHECK(q.stats().done == 1);
  REQUIRE(q.Read(1, b.ticket, 0, 0).ok());  // a chunk without a good line is done when read
  CHECK(q.stats().done == 2);
  // A report for a finished chunk comes from a worker that lost it: refused.
  CHECK(q.Trained(1, a.ticket, 7, 0).code() == Code::kFailedPrecondition);
  CHECK(q.stats().refused == 1);
  CHECK(q.Trained(1, 99, 1, 0).code() == Code::kInvalidArgument);
}

TEST_CASE("ChunkLeases: a released worker's chunk goes to another, resuming after its trained rows",
          "[chunk_leases]") {
  ChunkLeases q(ChunkLeaseOptions{2, 1, 1000});
  ChunkTicket a, b, again;
  REQUIRE(q.Take(1, 0, &a) == Took::kTicket);
  REQUIRE(q.Take(2, 0, &b) == Took::kTicket);
  REQUIRE(q.Read(1, a.ticket, 50, 0).ok());
  REQUIRE(q.Trained(1, a.ticket, 20, 0).ok());
  CHECK(q.Release(1) == 1);
  REQUIRE(q.Take(2, 0, &again) == Took::kTicket);
  CHECK(ChunkTicketIndex(again.ticket) == a.ticket);
  CHECK(again.ticket != a.ticket);  // another hand-out
  CHECK(again.skip == 20);
  // The released worker's report is refused, naming the chunk.
  Status s = q.Trained(1, a.ticket, 30, 0);
  CHECK(s.code() == Code::kFailedPrecondition);
  CHECK_THAT(s.message(), Catch::Contains("chunk 0 of epoch 0"));
  CHECK(q.stats().refused == 1);
  REQUIRE(q.Read(2, again.ticket, 50, 0).ok());
  REQUIRE(q.Trained(2, again.ticket, 50, 0).ok());
  CHECK(q.stats().done == 1);
}

TEST_CASE("ChunkLeases: a worker silent for lease_ms loses its chunks; any call renews them", "[chunk_leases]") {
  ChunkLeases q(ChunkLeaseOptions{2, 1, 100});
  ChunkTicket a, b, t;
  REQUIRE(q.Take(1, 0, &a) == Took::kTicket);
  REQUIRE(q.Take(2, 0, &b) == Took::kTicket);
  CHECK(q.NextExpiry() == 100);
  REQUIRE(q.Trained(1, a.ticket, 5, 90).ok());  // worker 1 renews until 190
  CHECK(q.Take(3, 99, &t) == Took::kWait);
  CHECK(q.Take(3, 100, &t) == Took::kTicket);   // worker 2's lease ended at 100
  CHECK(ChunkTicketIndex(t.ticket) == b.ticket);
  CHECK(q.Expire(189) == 0);
  CHECK(q.Expire(190) == 1);  // worker 1's too
  CHECK(q.Take(3, 190, &t) == Took::kTicket);
  CHECK(ChunkTicketIndex(t.ticket) == a.ticket);
  CHECK(t.skip == 5);
  CHECK(q.stats().returned == 2);
}

TEST_CASE("ChunkLeases: rows a worker read before it lost a chunk are refused once it holds the chunk again",
          "[chunk_leases]") {
  ChunkLeases q(ChunkLeaseOptions{1, 1, 100});
  ChunkTicket first, again;
  REQUIRE(q.Take(1, 0, &first) == Took::kTicket);
  REQUIRE(q.Trained(1, first.ticket, 10, 0).ok());
  // Silent past its lease (a long step), then back for a chunk: the same one.
  REQUIRE(q.Take(1, 500, &again) == Took::kTicket);
  CHECK(ChunkTicketIndex(again.ticket) == ChunkTicketIndex(first.ticket));
  CHECK(again.skip == 10);
  // Its row queue still holds lines 11-40 of the first hand-out; it reads
  // the chunk again from line 11: the old rows must not count.
  CHECK(q.Trained(1, first.ticket, 40, 500).code() == Code::kFailedPrecondition);
  REQUIRE(q.Trained(1, again.ticket, 40, 500).ok());
  REQUIRE(q.Read(1, again.ticket, 40, 500).ok());
  CHECK(q.stats().done == 1);
  // A ticket with bits above the hand-out's is none this queue gave.
  CHECK(q.Trained(1, first.ticket | int64_t{1} << 50, 1, 500).code() == Code::kInvalidArgument);
}

TEST_CASE("ChunkLeases: a report spanning a held and a lost chunk records neither", "[chunk_leases]") {
  ChunkLeases q(ChunkLeaseOptions{2, 1, 100});
  ChunkTicket a, b, t;
  REQUIRE(q.Take(1, 0, &a) == Took::kTicket);
  REQUIRE(q.Take(1, 0, &b) == Took::kTicket);
  REQUIRE(q.Release(1) == 2);  // lost both, then takes chunk a again
  REQUIRE(q.Take(1, 0, &t) == Took::kTicket);
  REQUIRE(ChunkTicketIndex(t.ticket) == ChunkTicketIndex(a.ticket));
  CHECK(q.TrainedAll(1, {t.ticket}, {3, 4}, 0).code() == Code::kInvalidArgument);
  // The step's batch ends chunk a's old hand-out and starts its new one:
  // refused whole, so the step applies nothing; the new hand-out goes back
  // too (the dropped batch is a hole in it) and keeps line 0.
  CHECK(q.TrainedAll(1, {a.ticket, t.ticket}, {7, 3}, 0).code() == Code::kFailedPrecondition);
  CHECK(q.Release(1) == 0);
  CHECK(q.Trained(1, t.ticket, 9, 0).code() == Code::kFailedPrecondition);  // rows after the hole
  ChunkTicket again;
  REQUIRE(q.Take(3, 0, &again) == Took::kTicket);
  CHECK(ChunkTicketIndex(again.ticket) == ChunkTicketIndex(a.ticket));
  CHECK(again.skip == 0);
}

TEST_CASE("ChunkLeases: options out of range are refused by name", "[chunk_leases]") {
  CHECK_THAT(ValidateChunkLeaseOptions({0, 1, 10}).message(), Catch::Contains("num_chunks"));
  CHECK_THAT(ValidateChunkLeaseOptions({4, 1, 0}).message(), Catch::Contains("lease_ms"));
  CHECK_THAT(ValidateChunkLeaseOptions({int64_t{1} << 30, int64_t{1} << 20, 10}).message(),
             Catch::Contains("num_epochs"));
  CHECK(ValidateChunkLeaseOptions({4, 0, 10}).ok());  // endless
}

// One seeded run: workers train chunks of `lines` lines a batch at a time;
// each step a random worker acts, and now and then one dies (released, or
// silent until its lease ends). With `moving`, the queue moves to another
// process now and then (a restore from its serialized state, on a clock
// 10000 ahead). A worker's batch counts as trained when its report is
// accepted (the update and the report of one step, as SharedCriteoBatchQueue
// runs them): every line of every epoch must be trained exactly once.
namespace {

// A queue as another process restores it from the words of Serialize.
ChunkLeases RoundTrip(const ChunkLeases& q, int64_t now) {
  std::vector<int64_t> w = q.Serialize();
  auto r = ChunkLeases::Restore(w.data(), w.size(), q.options(), now);
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  return std::move(*r);
}

void TrainEveryLineOnce(uint64_t seed, bool moving) {
  std::mt19937_64 rng(seed);
  const int64_t chunks = 1 + rng() % 6, epochs = 1 + rng() % 3, lines = 1 + rng() % 9, lease = 5 + rng() % 20;
  const ChunkLeaseOptions o{chunks, epochs, lease};
  auto q = std::make_unique<ChunkLeases>(o);
  struct Worker {
    int64_t id = 0;
    bool has = false;
    ChunkTicket t;
    int64_t next = 0;  // the next line to train (1-based)
    int64_t reader = 1;  // its row queue's incarnation
  };
  std::vector<Worker> workers(1 + rng() % 4);
  int64_t next_id = 0;
  for (Worker& w : workers) w.id = next_id++;
  std::map<std::pair<int64_t, int64_t>, int> trained;  // (ticket index, line) -> times
  int64_t now = 0, moves = 0;
  bool ended = false;
  for (int step = 0; step < 100000 && !ended; ++step) {
    now += rng() % 3;
    if (moving && rng() % 50 == 0) {
      q = std::make_unique<ChunkLeases>(RoundTrip(*q, now += 10000));
      ++moves;
    }
    Worker& w = workers[rng() % workers.size()];
    const int what = static_cast<int>(rng() % 100);
    if (what < 3) {  // dies, released at once
      q->Release(w.id);
      w = Worker{next_id++};
      continue;
    }
    if (what < 5) {  // dies silently: a new worker takes its place; the lease ends later
      w = Worker{next_id++};
      continue;
    }
    if (what < 7) {  // its row queue is made afresh (its slot moved): the rows of its chunk go with the old one
      w.has = false;
      ++w.reader;
      continue;
    }
    if (!w.has) {
      const Took took = q->Take(w.id, now, &w.t, w.reader);
      if (took == Took::kEnd) ended = true;
      if (took != Took::kTicket) continue;
      w.has = true;
      w.next = w.t.skip + 1;
      continue;
    }
    const int64_t upto = std::min<int64_t>(lines, w.next + static_cast<int64_t>(rng() % 3));
    if (w.next <= lines && rng() % 20 == 0) {
      // The report is taken but its reply lost (the queue's node died): the
      // worker's input restarts (its chunks released) and its step runs
      // again, repeating the report, maybe on the queue's next process.
      if (!q->TrainedAll(w.id, {w.t.ticket}, {upto}, now).ok()) {
        w.has = false;
        continue;
      }
      q->Release(w.id);
      if (moving) q = std::make_unique<ChunkLeases>(RoundTrip(*q, now += 10000));
      REQUIRE(q->TrainedAll(w.id, {w.t.ticket}, {upto}, now).ok());
      for (int64_t l = w.next; l <= upto; ++l) ++trained[{ChunkTicketIndex(w.t.ticket), l}];
      w.has = false;
      continue;
    }
    if (w.next <= lines) {
      Status s = q->Trained(w.id, w.t.ticket, upto, now);
      if (s.ok())
        for (int64_t l = w.next; l <= upto; ++l) ++trained[{ChunkTicketIndex(w.t.ticket), l}];
      else
        REQUIRE(s.code() == Code::kFailedPrecondition);  // lost its lease: it drops the chunk
      if (!s.ok()) {
        w.has = false;
        continue;
      }
      w.next = upto + 1;
    }
    if (w.next > lines) {
      Status s = q->Read(w.id, w.t.ticket, lines, now);
      REQUIRE((s.ok() || s.code() == Code::kFailedPrecondition));
      w.has = false;
    }
  }
  INFO("seed " << seed << ": " << chunks << " chunks, " << epochs << " epochs, " << lines << " lines, " << moves
                << " moves");
  REQUIRE(ended);
  REQUIRE(static_cast<int64_t>(trained.size()) == chunks * epochs * lines);
  for (const auto& [key, times] : trained) REQUIRE(times == 1);
}

}  // namespace

TEST_CASE("ChunkLeases: every line trained exactly once per epoch while workers die (500 seeded runs)",
          "[chunk_leases]") {
  for (uint64_t seed = 1; seed <= 500; ++seed) TrainEveryLineOnce(seed, /*moving=*/false);
}

TEST_CASE("ChunkLeases: a state restored mid-epoch goes on exactly as the original", "[chunk_leases]") {
  ChunkLeases q(ChunkLeaseOptions{4, 2, 100});
  ChunkTicket a, b, c, t;
  REQUIRE(q.Take(1, 0, &a) == Took::kTicket);
  REQUIRE(q.Take(2, 0, &b) == Took::kTicket);
  REQUIRE(q.Take(2, 0, &c) == Took::kTicket);
  REQUIRE(q.Trained(1, a.ticket, 7, 0).ok());
  REQUIRE(q.Read(2, b.ticket, 30, 0).ok());
  REQUIRE(q.Trained(2, b.ticket, 12, 0).ok());
  CHECK(q.Release(1) == 1);  // chunk 0 free, resuming after line 7
  CHECK(q.Trained(1, a.ticket, 9, 0).code() == Code::kFailedPrecondition);
  const int64_t version = q.version();
  CHECK(version > 0);

  ChunkLeases r = RoundTrip(q, 1000);
  CHECK(r.version() == version);
  CHECK(r.Serialize() == q.Serialize());
  CHECK(r.stats().handed == 3);
  CHECK(r.stats().refused == 1);
  CHECK(r.NextExpiry() == 1100);  // leases restart on the new clock
  // The same calls give the same answers on both (the original's clock moved alike).
  auto same = [&](auto call) {
    auto x = call(q, 0), y = call(r, 1000);
    CHECK(x == y);
  };
  same([&](ChunkLeases& z, int64_t off) {
    ChunkTicket u;
    const Took took = z.Take(3, off + 1, &u);
    return std::make_tuple(took, u.ticket, u.chunk, u.epoch, u.skip);
  });
  same([&](ChunkLeases& z, int64_t off) { return z.Trained(2, b.ticket, 30, off + 2).code(); });  // b done
  same([&](ChunkLeases& z, int64_t off) { return z.Trained(1, a.ticket, 8, off + 2).code(); });   // lost
  same([&](ChunkLeases& z, int64_t off) { return z.Read(2, c.ticket, 0, off + 3).code(); });      // c done
  same([&](ChunkLeases& z, int64_t) { return z.Release(3); });
  same([&](ChunkLeases& z, int64_t off) {
    ChunkTicket u;
    const Took took = z.Take(4, off + 4, &u);
    return std::make_tuple(took, u.ticket, u.chunk, u.epoch, u.skip);
  });
  same([&](ChunkLeases& z, int64_t off) { return z.Expire(off + 104); });  // worker 4's lease ends
  CHECK(r.Serialize() == q.Serialize());
  CHECK(r.version() == q.version());
  CHECK(r.version() > version);
  // A fresh queue round-trips too.
  ChunkLeases fresh(ChunkLeaseOptions{3, 0, 50});
  CHECK(RoundTrip(fresh, 0).Serialize() == fresh.Serialize());
  CHECK(RoundTrip(fresh, 0).Take(1, 0, &t) == Took::kTicket);
}

TEST_CASE("ChunkLeases: a corrupt or foreign state is refused, naming what is wrong", "[chunk_leases]") {
  const ChunkLeaseOptions o{4, 1, 100};
  ChunkLeases q(o);
  ChunkTicket a, b;
  REQUIRE(q.Take(1, 0, &a) == Took::kTicket);
  REQUIRE(q.Take(2, 0, &b) == Took::kTicket);
  REQUIRE(q.Release(2) == 1);
  const std::vector<int64_t> good = q.Serialize();
  // Layout: 12 header words (the last: open count 2), opens (index, holder,
  // handout, trained, last) of tickets 0 and 1, free count 1 and ticket 1,
  // worker count 1, worker 1 with reader 0 and 1 ticket: ticket 0; finished count 0.
  REQUIRE(good.size() == 12 + 10 + 2 + 1 + 4 + 1);
  auto refused = [&](std::vector<int64_t> w, const ChunkLeaseOptions& opts, const std::string& words) {
    auto r = ChunkLeases::Restore(w.data(), w.size(), opts, 0);
    INFO(words);
    REQUIRE(!r.ok());
    CHECK(r.status().code() == Code::kInvalidArgument);
    CHECK_THAT(r.status().message(), Catch::Contains(words));
  };
  auto with = [&](size_t at, int64_t v) {
    std::vector<int64_t> w = good;
    w[at] = v;
    return w;
  };
  REQUIRE(ChunkLeases::Restore(good.data(), good.size(), o, 0).ok());
  refused({}, o, "fewer than its header");
  refused(with(0, 7), o, "mark");
  refused(with(1, 9), o, "format 9");
  refused(good, ChunkLeaseOptions{5, 1, 100}, "the queue has 5");
  refused(with(2, -3), o, "version");
  refused(with(6, 99), o, "next ticket 99");
  refused(with(9, -1), o, "negative count");
  refused(with(11, 1 << 30), o, "open tickets");                // a count past the words there
  refused(with(12, 3), o, "never handed out");                  // open ticket index past next
  refused(with(17, 0), o, "out of order or twice");             // ticket 1 listed as 0 again
  refused(with(13, -2), o, "out of range");                     // holder
  refused(with(16, 0), o, "done, yet open");                    // ticket 0 read to line 0, trained 0
  refused(with(18, 1), o, "free tickets, but");                 // ticket 1 held by 1: free count wrong
  refused(with(23, 0), o, "not an open ticket without a holder");
  refused(with(25, 5), o, "worker 5 holds ticket 0");
  refused(with(25, -1), o, "id -1");
  refused(with(28, 1), o, "not an open ticket it holds");
  std::vector<int64_t> more = good;
  more.push_back(0);
  refused(more, o, "left over");
  std::vector<int64_t> shorter(good.begin(), good.end() - 1);
  refused(shorter, o, "before its finished tickets");
  std::vector<int64_t> shortest(good.begin(), good.end() - 3);
  refused(shortest, o, "1 workers");
  // Format 2 (no readers) is still read: a state a node checkpoint kept.
  std::vector<int64_t> format2 = good;
  format2[1] = 2;
  format2.erase(format2.begin() + 26);
  CHECK(ChunkLeases::Restore(format2.data(), format2.size(), o, 0).ok());
  // The finished tickets' records: (ticket, worker, line) each.
  auto finished = [&](std::vector<int64_t> rec) {
    std::vector<int64_t> w(good.begin(), good.end() - 1);
    w.push_back(static_cast<int64_t>(rec.size() / 3));
    w.insert(w.end(), rec.begin(), rec.end());
    return w;
  };
  refused(finished({3, 1, 5}), o, "finished ticket 3 was never handed out");
  refused(finished({0, 1, 5}), o, "finished ticket 0 is held");
  // A ticket taken back (free) may have a record: its holder's last report.
  const std::vector<int64_t> taken_back = finished({1, 2, 5});
  CHECK(ChunkLeases::Restore(taken_back.data(), taken_back.size(), o, 0).ok());
  refused(finished({-1, 1, 5}), o, "never handed out");
  std::vector<int64_t> w = finished({0, 1, 5});
  w[w.size() - 4] = 1 << 20;
  refused(w, o, "finished tickets");  // a count past the words there
}

TEST_CASE("ChunkLeases: the worker's repeat of the report that finished a chunk is a no-op, across a restore",
          "[chunk_leases]") {
  const ChunkLeaseOptions o{2, 1, 1000};
  ChunkLeases q(o);
  ChunkTicket a, b;
  REQUIRE(q.Take(1, 0, &a) == Took::kTicket);
  REQUIRE(q.Take(2, 0, &b) == Took::kTicket);
  REQUIRE(q.Read(1, a.ticket, 9, 0).ok());
  REQUIRE(q.TrainedAll(1, {a.ticket}, {9}, 0).ok());
  REQUIRE(q.stats().done == 1);
  // A step run again after it failed past its report repeats it: taken, nothing changes.
  const ChunkLeaseStats before = q.stats();
  CHECK(q.TrainedAll(1, {a.ticket}, {9}, 0).ok());
  CHECK(q.TrainedAll(1, {a.ticket}, {4}, 0).ok());  // an earlier batch of the same chunk, run again
  CHECK(q.stats().done == before.done);
  CHECK(q.stats().refused == before.refused);
  // Another worker's, or past the line it finished at, is no repeat.
  CHECK(q.TrainedAll(2, {a.ticket}, {9}, 0).code() == Code::kFailedPrecondition);
  CHECK(q.TrainedAll(1, {a.ticket}, {10}, 0).code() == Code::kFailedPrecondition);
  // The record moves with the state (a promoted backup takes the run again).
  const std::vector<int64_t> words = q.Serialize();
  auto r = ChunkLeases::Restore(words.data(), words.size(), o, 50);
  REQUIRE(r.ok());
  CHECK(r->TrainedAll(1, {a.ticket}, {9}, 50).ok());
  // A repeat beside a held chunk's report records the held one.
  CHECK(r->TrainedAll(2, {b.ticket}, {3}, 50).ok());
  REQUIRE(r->Read(2, b.ticket, 3, 50).ok());
  CHECK(r->stats().done == 2);
  CHECK(r->Serialize() != words);
}

TEST_CASE("ChunkLeases: the worker's repeat of a report taken before it lost the chunk is a no-op, across a restore",
          "[chunk_leases]") {
  const ChunkLeaseOptions o{2, 1, 1000};
  ChunkLeases q(o);
  ChunkTicket a, again;
  REQUIRE(q.Take(1, 0, &a) == Took::kTicket);
  REQUIRE(q.TrainedAll(1, {a.ticket}, {8}, 0).ok());
  REQUIRE(q.TrainedAll(1, {a.ticket}, {16}, 0).ok());  // taken; its reply lost with the queue's node
  // The worker's input restarts (its chunks go back), and its step runs
  // again on the queue's next process: the report is found taken.
  CHECK(q.Release(1) == 1);
  ChunkLeases r = RoundTrip(q, 50);
  const ChunkLeaseStats before = r.stats();
  CHECK(r.TrainedAll(1, {a.ticket}, {16}, 50).ok());
  CHECK(r.TrainedAll(1, {a.ticket}, {8}, 50).ok());
  CHECK(r.stats().refused == before.refused);
  // Rows past it were never taken, and another worker's report is no repeat.
  CHECK(r.TrainedAll(1, {a.ticket}, {17}, 50).code() == Code::kFailedPrecondition);
  CHECK(r.TrainedAll(2, {a.ticket}, {16}, 50).code() == Code::kFailedPrecondition);
  // The chunk resumes after the rows the repeat stands for, even for the same worker.
  REQUIRE(r.Take(1, 50, &again) == Took::kTicket);
  CHECK(ChunkTicketIndex(again.ticket) == ChunkTicketIndex(a.ticket));
  CHECK(again.skip == 16);
  CHECK(r.TrainedAll(1, {a.ticket}, {16}, 50).ok());  // the old hand-out's repeat, still a no-op
  REQUIRE(r.TrainedAll(1, {again.ticket}, {20}, 50).ok());
  // The old hand-out's rows past its last report stay refused (they are read again).
  CHECK(r.TrainedAll(1, {a.ticket}, {20}, 50).code() == Code::kFailedPrecondition);
}

TEST_CASE("ChunkLeases: a worker's Take naming another reader takes back the chunks it read into the old one",
          "[chunk_leases]") {
  ChunkLeases q(ChunkLeaseOptions{4, 1, 1000});
  ChunkTicket a, b, c, d;
  REQUIRE(q.Take(1, 0, &a, /*reader=*/7) == Took::kTicket);
  REQUIRE(q.Read(1, a.ticket, 20, 0).ok());  // read whole into the row queue of incarnation 7
  REQUIRE(q.Trained(1, a.ticket, 5, 0).ok());
  REQUIRE(q.Take(2, 0, &b, 9) == Took::kTicket);
  // The same reader, or none named: nothing goes back.
  REQUIRE(q.Take(1, 0, &c, 7) == Took::kTicket);
  CHECK(q.ReadsInto(1, 0) == 0);
  CHECK(q.stats().returned == 0);
  // Its row queue was made afresh (its slot moved): its chunks go back
  // first, and the first comes to it again after its trained rows.
  REQUIRE(q.Take(1, 0, &d, 8) == Took::kTicket);
  CHECK(q.stats().returned == 2);
  CHECK(ChunkTicketIndex(d.ticket) == ChunkTicketIndex(a.ticket));
  CHECK(d.skip == 5);
  // The old queue's rows are refused; the other worker keeps its chunk.
  CHECK(q.TrainedAll(1, {a.ticket}, {10}, 0).code() == Code::kFailedPrecondition);
  CHECK(q.Trained(2, b.ticket, 3, 0).ok());
  // The reader travels with the state.
  ChunkLeases r = RoundTrip(q, 10);
  CHECK(r.ReadsInto(1, 8) == 0);
  CHECK(r.ReadsInto(1, 3) == 1);
  CHECK(r.stats().returned == 3);  // a's and c's before, d's now
}

TEST_CASE("ChunkLeases: every line trained exactly once while the queue moves between processes (300 runs)",
          "[chunk_leases]") {
  for (uint64_t seed = 1; seed <= 300; ++seed) TrainEveryLineOnce(seed, /*moving=*/true);
}
