// Work sharing in one process: workers (each its own SharedCriteoBatchQueue,
// QueueRunner and training thread) take the chunks of one chunk queue actor;
// every line is trained once per epoch, also when a worker dies mid-epoch
// (its chunk resumed by another after its trained rows); bad input fails the
// worker's enqueue naming the file.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <future>
#include <map>
#include <mutex>
#include <thread>

#include "actors/chunk_queue_actor.h"
#include "kernels/chunk_queue_service.h"
#include "kernels/criteo_format.h"
#include "shardflow/chunk_queue_ops.h"
#include "shardflow/ops.h"
#include "shardflow/queue_ops.h"
#include "shardflow/queue_runner.h"
#include "shardflow/reader_ops.h"
#include "shardflow/session.h"
#include "tests/support/criteo_files.h"
#include "tests/support/caf_system.h"
#include "tests/support/temp_dir.h"
#include "tests/support/wait.h"

using namespace sf;
using sf::testing::CriteoLine;
using sf::testing::TempDir;
using sf::testing::WriteFile;
using sf::testing::WriteGzipFile;

namespace {

// Files of `lines` lines each (the second gzip), lines numbered across them.
std::vector<std::string> WriteCriteoFiles(const TempDir& dir, int files, int lines, int64_t* total) {
  std::vector<std::string> paths;
  for (int f = 0; f < files; ++f) {
    std::string text;
    for (int i = 0; i < lines; ++i) text += CriteoLine((*total)++) + "\n";
    const std::string path = dir / ("part" + std::to_string(f) + (f == 1 ? ".gz" : ".tsv"));
    if (f == 1) WriteGzipFile(path, text);
    else WriteFile(path, text);
    paths.push_back(path);
  }
  return paths;
}

// Each line's number by its field-0 id (CriteoLine gives every line its own).
std::map<int64_t, int64_t> LineOfId(int64_t total) {
  std::map<int64_t, int64_t> line_of;
  for (int64_t i = 0; i < total; ++i) line_of[CriteoCategoricalId(0, static_cast<uint64_t>(i))] = i;
  return line_of;
}

struct Worker {
  ops::SharedCriteoInput in;
  std::unique_ptr<QueueRunner> runner;
  std::thread thread;
  int64_t steps = 0;
  Status error;
};

}  // namespace

TEST_CASE("SharedCriteoBatchQueue: workers train every line once per epoch, also when one dies mid-epoch",
          "[chunk_queue]") {
  const bool kill = GENERATE(false, true);
  TempDir dir("sf_chunk_queue");
  int64_t total = 0;
  auto files = WriteCriteoFiles(dir, 4, 400, &total);
  auto plan = ops::PlanCriteoChunks(files, 6000);  // a dozen chunks; the gzip file is one
  REQUIRE(plan.ok());
  REQUIRE(plan->num_chunks() > 6);
  const std::map<int64_t, int64_t> line_of = LineOfId(total);

  Graph g;
  ops::ChunkQueueOptions qo;
  qo.num_epochs = 2;
  Output q = ops::ChunkQueue(g, plan->num_chunks(), qo, "chunks");
  CriteoReaderOptions ro;
  constexpr int kWorkers = 3;
  std::vector<Worker> workers(kWorkers);
  for (int w = 0; w < kWorkers; ++w)
    workers[w].in = ops::SharedCriteoBatchQueue(g, q, *plan, ro, /*worker=*/100 + w, /*batch_size=*/64, 0,
                                                "worker" + std::to_string(w));
  REQUIRE(g.status().ok());
  // Workers' graphs name their nodes alike (one program, many processes):
  // each worker still gets a row queue of its own on a shared task.
  std::vector<std::string> row_queues;
  for (int64_t worker : {1, 2}) {
    Graph wg;
    auto in = ops::SharedCriteoBatchQueue(wg, ops::ChunkQueue(wg, plan->num_chunks(), qo, "chunks"), *plan, ro, worker,
                                          64, 0, "same");
    REQUIRE(wg.status().ok());
    auto node = wg.FindNode("same/queue");
    REQUIRE(node.ok());
    row_queues.push_back(*wg.node(*node).attrs.Get<std::string>("shared_name"));
  }
  CHECK(row_queues[0] != row_queues[1]);
  Session s(g);

  std::mutex mu;
  std::map<std::pair<int64_t, int64_t>, int> trained;  // (epoch, line) -> times
  const int victim = kill ? 1 : -1;
  for (int w = 0; w < kWorkers; ++w) {
    Worker& wk = workers[w];
    QueueRunnerOptions r;
    r.parallel = 2;
    r.close_target = wk.in.close.name();
    r.cancel_target = wk.in.cancel.name();
    wk.runner = std::make_unique<QueueRunner>(s, std::vector<std::string>{wk.in.enqueue.name()}, nullptr, r);
    REQUIRE(wk.runner->Start().ok());
  }
  for (int w = 0; w < kWorkers; ++w) {
    workers[w].thread = std::thread([&, w] {
      Worker& wk = workers[w];
      for (;;) {
        auto b = s.Run({}, Fetches{wk.in.categorical, wk.in.ticket, wk.in.pos});
        if (!b.ok()) {
          if (b.status().code() != Code::kOutOfRange) {
            wk.error = b.status();
            std::fprintf(stderr, "worker %d: %s\n", w, b.status().ToString().c_str());
          }
          return;
        }
        // The victim dies with a batch dequeued and not trained.
        if (w == victim && wk.steps == 3) return;
        const Tensor& ids = (*b)[0];
        const Tensor& tickets = (*b)[1];
        {
          std::lock_guard<std::mutex> l(mu);
          for (int64_t row = 0; row < ids.shape()[0]; ++row) {
            const int64_t epoch = ChunkTicketIndex(tickets.data<int64_t>()[row]) / plan->num_chunks();
            ++trained[{epoch, line_of.at(ids.data<int64_t>()[row * kCriteoCategorical])}];
          }
        }
        auto t = s.Run({{wk.in.trained_ticket, (*b)[1]}, {wk.in.trained_pos, (*b)[2]}}, Fetches{}, {wk.in.trained});
        if (!t.ok()) {
          wk.error = t.status();
          std::fprintf(stderr, "worker %d: %s\n", w, t.status().ToString().c_str());
          return;
        }
        ++wk.steps;
      }
    });
  }
  if (kill) {
    // The victim is gone: stop its input and hand its chunks to the others.
    Worker& v = workers[victim];
    v.thread.join();
    v.runner->Stop();
    CHECK(v.runner->Join().ok());
    auto released = s.Run({}, Fetches{}, {v.in.release});
    REQUIRE(released.ok());
  }
  for (int w = 0; w < kWorkers; ++w) {
    if (workers[w].thread.joinable()) workers[w].thread.join();
    INFO("worker " << w << ": " << workers[w].error.ToString());
    CHECK(workers[w].error.ok());
    if (w != victim) CHECK(workers[w].runner->Join().ok());
    CHECK(workers[w].steps > 0);
  }
  CHECK(trained.size() == static_cast<size_t>(2 * total));
  int twice = 0;
  for (const auto& [key, times] : trained) twice += times != 1;
  CHECK(twice == 0);
}

TEST_CASE("A shared input's bad chunk fails the worker's enqueue naming the file", "[chunk_queue]") {
  TempDir dir("sf_chunk_queue_bad");
  std::string text;
  for (int i = 0; i < 300; ++i) text += CriteoLine(i) + "\n";
  WriteFile(dir / "good.tsv", text);
  WriteGzipFile(dir / "cut.gz", text);
  WriteFile(dir / "gone.tsv", text);
  auto plan = ops::PlanCriteoChunks({dir / "gone.tsv", dir / "cut.gz"}, 1 << 20);
  REQUIRE(plan.ok());
  REQUIRE(plan->num_chunks() == 2);
  // After planning: one file goes away, the gzip file loses its end.
  REQUIRE(::unlink((dir / "gone.tsv").c_str()) == 0);
  struct stat st;
  REQUIRE(::stat((dir / "cut.gz").c_str(), &st) == 0);
  REQUIRE(::truncate((dir / "cut.gz").c_str(), st.st_size / 2) == 0);

  Graph g;
  Output q = ops::ChunkQueue(g, plan->num_chunks(), {}, "chunks");
  auto in = ops::SharedCriteoBatchQueue(g, q, *plan, CriteoReaderOptions{}, 1, 64);
  REQUIRE(g.status().ok());
  Session s(g);
  auto first = s.Run({}, Fetches{}, {in.enqueue});
  CHECK(first.status().code() == Code::kNotFound);
  CHECK_THAT(first.status().message(), Catch::Contains("gone.tsv"));
  auto second = s.Run({}, Fetches{}, {in.enqueue});
  CHECK(second.status().code() == Code::kDataLoss);
  CHECK_THAT(second.status().message(), Catch::Contains("cut.gz"));

  // A plan that names a missing file fails when it is made, naming it.
  auto missing = ops::PlanCriteoChunks({dir / "good.tsv", dir / "nowhere.tsv"}, 1000);
  CHECK(missing.status().code() == Code::kNotFound);
  CHECK_THAT(missing.status().message(), Catch::Contains("nowhere.tsv"));
  // Two workers whose plans differ cannot share a chunk queue.
  Graph g2;
  Output a = ops::ChunkQueue(g2, 3, {}, "shared");
  Output b = ops::ChunkQueue(g2, 4, {}, "shared");
  Session s2(g2);
  auto both = s2.Run({}, Fetches{a, b});
  CHECK(both.status().code() == Code::kInvalidArgument);
  CHECK_THAT(both.status().message(), Catch::Contains("same files"));
}

TEST_CASE("QueueDequeueAvailable takes what the queue holds, up to n, without waiting for n", "[chunk_queue]") {
  Graph g;
  ops::QueueOptions qo;
  qo.shapes = {PartialShape(Shape{})};
  Output q = ops::FIFOQueue(g, {DType::kInt64}, qo, "q");
  auto x = ops::Placeholder(g, DType::kInt64, PartialShape(Shape{-1}), "x");
  Operation enqueue = ops::QueueEnqueueMany(g, q, {x});
  Operation close = ops::QueueClose(g, q);
  std::vector<Output> some = ops::QueueDequeueAvailable(g, q, 10);
  REQUIRE(g.status().ok());
  Session s(g);
  Tensor three(DType::kInt64, {3});
  for (int i = 0; i < 3; ++i) three.data<int64_t>()[i] = 7 + i;
  REQUIRE(s.Run({{x, three}}, Fetches{}, {enqueue}).ok());
  auto got = s.Run({}, Fetches{some[0]});  // 3 of the 10 asked for, the queue still open
  REQUIRE(got.ok());
  REQUIRE((*got)[0].num_elements() == 3);
  CHECK((*got)[0].data<int64_t>()[2] == 9);
  REQUIRE(s.Run({}, Fetches{}, {close}).ok());
  CHECK(s.Run({}, Fetches{some[0]}).status().code() == Code::kOutOfRange);
}

TEST_CASE("A chunk queue made afresh under the same name refuses the tickets of the one before", "[chunk_queue]") {
  // Two sessions stand for the node that held the queue and the one its task moved to.
  Graph g;
  Output q = ops::ChunkQueue(g, 4, {}, "chunks");
  auto worker = ops::Const(g, Tensor::Scalar<int64_t>(7));
  const int take = g.AddNode("ChunkQueueTake", {q, worker});
  auto tickets = ops::Placeholder(g, DType::kInt64, PartialShape(Shape{-1}), "tickets");
  auto pos = ops::Placeholder(g, DType::kInt64, PartialShape(Shape{-1}), "pos");
  const int report = g.AddNode("ChunkQueueReport", {q, worker, tickets, pos});
  REQUIRE(g.status().ok());
  Session before(g), after(g);
  auto t = before.Run({}, Fetches{Output(&g, take, 0)});
  REQUIRE(t.ok());
  Tensor line(DType::kInt64, {1});
  line.data<int64_t>()[0] = 5;
  Tensor ticket(DType::kInt64, {1});
  ticket.data<int64_t>()[0] = (*t)[0].scalar_as<int64_t>();
  CHECK(before.Run({{tickets, ticket}, {pos, line}}, Fetches{}, {Operation(&g, report)}).ok());
  REQUIRE(after.Run({}, Fetches{Output(&g, take, 0)}).ok());  // the new queue hands out chunk 0 again
  auto refused = after.Run({{tickets, ticket}, {pos, line}}, Fetches{}, {Operation(&g, report)});
  CHECK(refused.status().code() == Code::kFailedPrecondition);
  CHECK_THAT(refused.status().message(), Catch::Contains("earlier chunk queue"));
}

namespace {

// One worker's training step for the lease test: the batch's lines counted
// in `seen` (the update) and its rows reported trained, in one run.
struct CountingWorker {
  ops::SharedCriteoInput in;
  Output delta;  // [lines] float: 1 at each line of the batch
  Operation train;
};

}  // namespace

TEST_CASE("A lease that ends mid-epoch costs the worker its batch, never a row trained twice or skipped",
          "[chunk_queue]") {
  TempDir dir("sf_chunk_queue_lease");
  int64_t total = 0;
  auto files = WriteCriteoFiles(dir, 1, 200, &total);
  auto plan = ops::PlanCriteoChunks(files, 1 << 20);  // one chunk
  REQUIRE(plan.ok());
  REQUIRE(plan->num_chunks() == 1);
  const std::map<int64_t, int64_t> line_of = LineOfId(total);

  Graph g;
  ops::ChunkQueueOptions qo;
  qo.lease_ms = 1000;
  Output q = ops::ChunkQueue(g, plan->num_chunks(), qo, "chunks");
  Output seen = ops::Variable(g, "seen", ops::Const(g, std::vector<float>(total, 0.0f), {total}));
  std::vector<CountingWorker> workers(2);
  for (int w = 0; w < 2; ++w) {
    CountingWorker& wk = workers[w];
    // A row queue smaller than the chunk: worker 0's enqueue is still
    // under way when it loses the chunk.
    wk.in = ops::SharedCriteoBatchQueue(g, q, *plan, CriteoReaderOptions{}, /*worker=*/w + 1, /*batch_size=*/32,
                                        /*capacity=*/64, "worker" + std::to_string(w));
    wk.delta = ops::Placeholder(g, DType::kFloat32, PartialShape(Shape{total}), "delta" + std::to_string(w));
    Output add = ops::AssignAdd(g, ops::VariableHandle(seen), wk.delta);
    wk.train = ops::NoOp(g, {Operation(&g, add.node)}, "train" + std::to_string(w));  // a group, as Minimize's
    REQUIRE(ops::ReportTrainedBefore(g, wk.in, wk.train).ok());
  }
  Operation init = ops::GlobalVariablesInitializer(g);
  REQUIRE(g.status().ok());
  std::atomic<int64_t> now_ms{0};
  SessionOptions so;
  so.chunk_queue_clock_ms = [&now_ms] { return now_ms.load(); };
  Session s(g, so);
  REQUIRE(s.Run({}, Fetches{}, {init}).ok());

  // Dequeues a batch of worker w and trains it: the dequeue's status, and
  // the step's in *step.
  auto train = [&](int w, Status* step) -> Status {
    CountingWorker& wk = workers[w];
    auto b = s.Run({}, Fetches{wk.in.categorical, wk.in.ticket, wk.in.pos});
    if (!b.ok()) return b.status();
    Tensor delta(DType::kFloat32, {total});
    std::fill_n(delta.data<float>(), total, 0.0f);
    const Tensor& ids = (*b)[0];
    for (int64_t row = 0; row < ids.shape()[0]; ++row)
      delta.data<float>()[line_of.at(ids.data<int64_t>()[row * kCriteoCategorical])] += 1.0f;
    *step = s.Run({{wk.delta, delta}, {wk.in.trained_ticket, (*b)[1]}, {wk.in.trained_pos, (*b)[2]}}, Fetches{},
                  {wk.train, wk.in.trained})
                .status();
    return Status::OK();
  };
  auto enqueue = [&](int w) {
    return std::async(std::launch::async, [&, w] { return s.Run({}, Fetches{}, {workers[w].in.enqueue}).status(); });
  };

  // Closes worker w's row queue once its enqueue ended: the worker then
  // drains it to OutOfRange. The enqueue's status.
  auto close_after = [&](int w, std::future<Status>& enqueue) {
    return std::async(std::launch::async, [&, w] {
      Status s_enqueue = enqueue.get();
      Status closed = s.Run({}, Fetches{}, {workers[w].in.close}).status();
      return s_enqueue.ok() ? closed : s_enqueue;
    });
  };

  auto a_enqueue = enqueue(0);  // worker 0 takes the chunk; its enqueue blocks on its full row queue
  Status step;
  REQUIRE(train(0, &step).ok());
  REQUIRE(step.ok());  // rows 1-32 trained and reported
  now_ms = 5000;       // worker 0's lease ends before its next report
  REQUIRE(train(0, &step).ok());
  CHECK(ops::IsLostChunk(step));
  CHECK_THAT(step.message(), Catch::Contains("chunk 0 of epoch 0"));
  // Worker 1 takes the chunk over after the last row reported trained.
  auto b_enqueue = enqueue(1);
  auto a_done = close_after(0, a_enqueue);
  auto b_done = close_after(1, b_enqueue);
  // Worker 0 drains what it had read: every step refused, changing nothing.
  int64_t refused = 1;
  for (;;) {
    Status got = train(0, &step);
    if (got.code() == Code::kOutOfRange) break;
    REQUIRE(got.ok());
    CHECK(ops::IsLostChunk(step));
    ++refused;
  }
  // Its enqueue ended well: a chunk lost while it was read is no error of
  // the worker's input (the new holder reads it again).
  CHECK(a_done.get().ok());
  int64_t b_steps = 0;
  for (;;) {
    Status got = train(1, &step);
    if (got.code() == Code::kOutOfRange) break;
    REQUIRE(got.ok());
    INFO(step.ToString());
    CHECK(step.ok());
    ++b_steps;
  }
  CHECK(b_done.get().ok());
  CHECK(refused >= 2);
  CHECK(b_steps > 0);
  auto counts = s.Run({}, Fetches{seen});
  REQUIRE(counts.ok());
  std::string not_once;  // "line: times" of each line not trained once
  for (int64_t i = 0; i < total; ++i)
    if (const float times = (*counts)[0].data<float>()[i]; times != 1.0f)
      not_once += std::to_string(i) + ": " + std::to_string(static_cast<int>(times)) + " ";
  CHECK(not_once == "");
}

namespace {

// A node's store of chunk queue states, by hand: writes wait until the
// test lets them end (held), loads answer what `stored` holds.
struct FakeChunkStore {
  std::mutex mu;
  std::map<std::string, Tensor> written;  // the queue's own writes, in order (the last)
  std::map<std::string, Tensor> stored;   // what load answers
  std::vector<std::function<void(Status)>> held;
  int64_t writes = 0;
  bool hold = false;

  runtime::ChunkQueueStore Store() {
    runtime::ChunkQueueStore s;
    s.persist = [this](const std::string& name, Tensor state, std::function<void(Status)> done) {
      std::unique_lock<std::mutex> l(mu);
      REQUIRE(IsChunkQueueState(state));
      written[name] = state;
      ++writes;
      if (hold) return held.push_back(std::move(done));
      l.unlock();
      done(Status::OK());
    };
    s.load = [this](const std::string& name) {
      std::lock_guard<std::mutex> l(mu);
      auto it = stored.find(name);
      return it == stored.end() ? Tensor() : it->second;
    };
    return s;
  }
  int64_t Writes() {
    std::lock_guard<std::mutex> l(mu);
    return writes;
  }
  void Release() {
    std::vector<std::function<void(Status)>> h;
    {
      std::lock_guard<std::mutex> l(mu);
      h.swap(held);
      hold = false;
    }
    for (auto& d : h) d(Status::OK());
  }
};

template <class T>
T Await(std::future<T>& f) {
  REQUIRE(f.wait_for(std::chrono::seconds(20)) == std::future_status::ready);
  return f.get();
}

Result<ChunkTicket> TakeOf(runtime::ActorChunkQueues& q, int64_t id, int64_t worker) {
  auto p = std::make_shared<std::promise<Result<ChunkTicket>>>();
  auto f = p->get_future();
  q.Take(id, worker, 0, 0, [p](Result<ChunkTicket> t) { p->set_value(std::move(t)); });
  return Await(f);
}

Status ReportOf(runtime::ActorChunkQueues& q, int64_t id, int64_t worker, int64_t ticket, int64_t pos, bool read) {
  auto p = std::make_shared<std::promise<Status>>();
  auto f = p->get_future();
  q.Report(id, worker, {ticket}, {pos}, read, [p](Status s) { p->set_value(std::move(s)); });
  return Await(f);
}

Result<int64_t> ReleaseOf(runtime::ActorChunkQueues& q, int64_t id, int64_t worker) {
  auto p = std::make_shared<std::promise<Result<int64_t>>>();
  auto f = p->get_future();
  q.Release(id, worker, [p](Result<int64_t> n) { p->set_value(std::move(n)); });
  return Await(f);
}

}  // namespace

TEST_CASE("A chunk queue answers a change once its state is written; one made where a state is stored goes on from it",
          "[chunk_queue]") {
  testing::CafSystem cs;
  std::atomic<int64_t> now{0};
  auto clock = [&now] { return now.load(); };
  FakeChunkStore store;
  const ChunkLeaseOptions o{4, 1, 1000};
  runtime::ActorChunkQueues a(cs.sys, clock);
  a.SetStore(store.Store());
  auto qa = a.Resolve("q", o);
  REQUIRE(qa.ok());
  CHECK(store.Writes() == 0);  // nothing changed yet

  // The Take's answer waits for its state's write.
  {
    std::lock_guard<std::mutex> l(store.mu);
    store.hold = true;
  }
  auto p = std::make_shared<std::promise<Result<ChunkTicket>>>();
  auto first = p->get_future();
  a.Take(*qa, 1, 0, 0, [p](Result<ChunkTicket> t) { p->set_value(std::move(t)); });
  REQUIRE(testing::WaitFor([&] { return store.Writes() == 1; }, std::chrono::seconds(20)));
  CHECK(first.wait_for(std::chrono::milliseconds(0)) == std::future_status::timeout);
  store.Release();
  Result<ChunkTicket> t1 = Await(first);
  REQUIRE(t1.ok());
  CHECK(t1->chunk == 0);
  REQUIRE(ReportOf(a, *qa, 1, t1->ticket, 5, false).ok());  // lines 1-5 of chunk 0 trained
  auto t2 = TakeOf(a, *qa, 2);
  REQUIRE(t2.ok());
  CHECK(t2->chunk == 1);
  CHECK(store.Writes() == 3);

  // Another node's queue of the same name (its slot moved there) goes on
  // from what a wrote: the tickets a handed out stay valid there.
  Tensor moved;
  {
    std::lock_guard<std::mutex> l(store.mu);
    moved = store.written["q"];
    store.stored["q"] = moved;
  }
  now = 50000;  // another process's clock
  FakeChunkStore other;
  {
    std::lock_guard<std::mutex> l(other.mu);
    other.stored["q"] = moved;
  }
  runtime::ActorChunkQueues b(cs.sys, clock);
  b.SetStore(other.Store());
  auto qb = b.Resolve("q", o);
  REQUIRE(qb.ok());
  auto t3 = TakeOf(b, *qb, 3);
  REQUIRE(t3.ok());
  CHECK(t3->chunk == 2);  // 0 and 1 are held
  CHECK(ReportOf(b, *qb, 2, t2->ticket, 9, true).ok());  // a's ticket, reported to b
  CHECK(ReportOf(b, *qb, 2, t2->ticket, 9, false).ok());  // chunk 1 done
  CHECK(ReleaseOf(b, *qb, 1).value() == 1);  // worker 1 is gone: chunk 0 again, after line 5
  auto t4 = TakeOf(b, *qb, 4);
  REQUIRE(t4.ok());
  CHECK(t4->chunk == 0);
  CHECK(t4->skip == 5);
  CHECK(ReportOf(b, *qb, 1, t1->ticket, 7, false).code() == Code::kFailedPrecondition);

  // a's queue, resolved again where b's state is stored (the slot came
  // back), goes on from b's; resolved again with the same state, it keeps
  // its changes since.
  Tensor from_b;
  {
    std::lock_guard<std::mutex> l(other.mu);
    from_b = other.written["q"];
  }
  {
    std::lock_guard<std::mutex> l(store.mu);
    store.stored["q"] = from_b;
  }
  REQUIRE(a.Resolve("q", o).ok());
  auto t5 = TakeOf(a, *qa, 5);
  REQUIRE(t5.ok());
  CHECK(t5->chunk == 3);  // 0 and 2 held (by 4 and 3), 1 done
  REQUIRE(a.Resolve("q", o).ok());
  CHECK(ReportOf(a, *qa, 5, t5->ticket, 3, false).ok());  // still worker 5's
  {
    std::lock_guard<std::mutex> l(store.mu);
    store.stored["q"] = store.written["q"];  // a's own state: nothing new either
  }
  REQUIRE(a.Resolve("q", o).ok());
  CHECK(ReportOf(a, *qa, 5, t5->ticket, 4, false).ok());

  // A stored state that is none of this queue is refused, naming the queue.
  {
    std::lock_guard<std::mutex> l(store.mu);
    Tensor bad = store.written["q"].Copy();
    // Its last record, of the chunk done (ticket, worker, line): a ticket never handed out.
    bad.data<int64_t>()[bad.num_elements() - 3] = 99;
    store.stored["r"] = bad;
    store.stored["s"] = Tensor::FromVector(std::vector<int64_t>{1, 2, 3});
  }
  auto r = a.Resolve("r", o);
  CHECK(r.status().code() == Code::kInvalidArgument);
  CHECK_THAT(r.status().message(), Catch::Contains("chunk queue 'r'") && Catch::Contains("ticket 99"));
  CHECK(a.Resolve("s", o).status().code() == Code::kInvalidArgument);
  CHECK(a.Resolve("q", ChunkLeaseOptions{5, 1, 1000}).status().code() == Code::kInvalidArgument);
  a.Shutdown();
  b.Shutdown();
}
