// Ring all-reduce (ops::AllReduce, sum of float32) throughput, with every
// rank in one process (inproc: one Session, the ranks' nodes run by
// concurrent Runs) or each rank in its own `shardflow node` process with its
// own ClusterSession (cluster: chunks travel node to node over Cap'n Proto RPC,
// mutual TLS unless --insecure).
//
// Each rank's step fills its tensor on its node (Fill), reduces it and
// fetches only its Sum, so no tensor crosses the client. The same step
// without the AllReduce is timed as the baseline; reduce_ms = step - baseline
// (medians). gbytes_per_sec = bytes / reduce time (the tensor each rank
// holds); bus_gbytes_per_sec = 2 (n - 1) / n * bytes / reduce time (what
// each rank sends, comparable across n, as NCCL reports it).
// Keys: mode, bytes, ranks, processes, step_ms, baseline_ms, reduce_ms,
// gbytes_per_sec, bus_gbytes_per_sec; the summary gives the cluster's bus
// bandwidth at the largest size per rank count, raw_tcp_gbytes_per_sec (an
// echo of the largest size over plain loopback TCP, measured here) and their
// ratios (target: bus >= 50% of raw TCP).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <sstream>
#include <thread>
#include <vector>

#include "bench/raw_tcp_echo.h"
#include "examples/common/flags.h"
#include "examples/common/json.h"
#include "examples/common/local_cluster.h"
#include "shardflow/cluster.h"
#include "shardflow/ops.h"
#include "shardflow/replication.h"
#include "shardflow/session.h"

using namespace sf;
using namespace sf::examples;

namespace {

void Die(const std::string& what) {
  std::fprintf(stderr, "bench_allreduce: %s\n", what.c_str());
  std::exit(1);
}

std::vector<int64_t> ParseList(const std::string& s) {
  std::vector<int64_t> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(std::stoll(item));
  return out;
}

// Rank r's nodes (on task r when `task` is set): dims -> Fill(r + 1) ->
// AllReduce -> Sum, and the baseline Sum of the fill.
struct RankGraph {
  Output dims, reduced_sum, plain_sum;
  void Build(Graph& g, int r, int n, bool task) {
    if (task) {
      auto scope = g.DeviceScope("/job:worker/task:" + std::to_string(r));
      Add(g, r, n);
    } else {
      Add(g, r, n);
    }
  }
  void Add(Graph& g, int r, int n) {
    dims = ops::Placeholder(g, DType::kInt32, {1}, "dims_" + std::to_string(r));
    auto x = ops::Fill(g, dims, ops::Const(g, static_cast<float>(r + 1)));
    reduced_sum = ops::Sum(g, ops::AllReduce(g, x, "bench", n, r));
    plain_sum = ops::Sum(g, x);
  }
};

using RunFn = std::function<Result<std::vector<Tensor>>(int r, const FeedMap&, const std::vector<Output>&)>;

// Median ms of `reps` rounds in which every rank runs its fetch concurrently
// (two rounds of warm-up first); checks each reduced sum.
double TimeRounds(int n, int64_t elems, int reps, bool reduce, const std::vector<RankGraph>& ranks,
                  const RunFn& run) {
  std::vector<double> times;
  Tensor dims = Tensor::FromVector(std::vector<int32_t>{static_cast<int32_t>(elems)}, {1});
  const double want = static_cast<double>(elems) * n * (n + 1) / 2;
  for (int i = -2; i < reps; ++i) {
    std::vector<Status> results(n);
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r)
      threads.emplace_back([&, r] {
        const RankGraph& rg = ranks[r];
        auto out = run(r, {{rg.dims.name(), dims}}, {reduce ? rg.reduced_sum : rg.plain_sum});
        if (!out.ok()) {
          results[r] = out.status();
          return;
        }
        const double got = (*out)[0].data<float>()[0];
        if (reduce && std::abs(got - want) > 1e-3 * want)
          results[r] = Internal("rank " + std::to_string(r) + " summed " + std::to_string(got) + ", want " +
                                std::to_string(want));
      });
    for (auto& t : threads) t.join();
    for (const Status& s : results)
      if (!s.ok()) Die(s.ToString());
    if (i >= 0) times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  flags.String("ranks", "2,3", "group sizes")
      .String("bytes", "4096,1048576,16777216,67108864", "tensor bytes per rank (float32)")
      .String("modes", "inproc,cluster", "inproc and/or cluster")
      .Int("reps", 10, "timed rounds per configuration (median)")
      .Bool("insecure", "nodes and sessions in plaintext (default: mutual TLS)")
      .Bool("json", "print JSON lines");
  ParseOrExit(flags, argc, argv, "bench_allreduce");
  KeepTensorMemoryWarm();
  const bool json = flags.GetBool("json");
  const int reps = static_cast<int>(flags.GetInt("reps"));
  const std::string modes = flags.GetString("modes");
  const auto sizes = ParseList(flags.GetString("bytes"));
  std::map<int, double> summary;  // ranks -> cluster bus GB/s at the largest size

  for (int64_t n64 : ParseList(flags.GetString("ranks"))) {
    const int n = static_cast<int>(n64);
    for (const std::string mode : {"inproc", "cluster"}) {
      if (modes.find(mode) == std::string::npos) continue;
      const bool cluster = mode == "cluster";
      std::vector<std::unique_ptr<Graph>> graphs;
      std::vector<RankGraph> ranks(n);
      std::unique_ptr<Session> local;
      std::vector<std::unique_ptr<ClusterSession>> sessions;
      LocalCluster lc;
      if (cluster) {
        lc.SetInsecure(flags.GetBool("insecure"));
        Status st = lc.Start(n, 3600);
        if (!st.ok()) Die(st.ToString());
        ClusterOptions co;
        co.address = lc.addresses()[0];
        co.tls_dir = lc.tls_dir();
        co.insecure = flags.GetBool("insecure");
        for (int r = 0; r < n; ++r) {
          graphs.push_back(std::make_unique<Graph>());
          ranks[r].Build(*graphs.back(), r, n, true);
          auto s = ClusterSession::Connect(*graphs.back(), co);
          if (!s.ok()) Die(s.status().ToString());
          sessions.push_back(std::move(*s));
        }
      } else {
        graphs.push_back(std::make_unique<Graph>());
        for (int r = 0; r < n; ++r) ranks[r].Build(*graphs[0], r, n, false);
        local = std::make_unique<Session>(*graphs[0]);
      }
      RunFn run = [&](int r, const FeedMap& f, const std::vector<Output>& fetch) {
        return cluster ? sessions[r]->Run(f, fetch) : local->Run(f, fetch);
      };
      for (int64_t bytes : sizes) {
        const int64_t elems = std::max<int64_t>(1, bytes / 4);
        const double step = TimeRounds(n, elems, reps, true, ranks, run);
        const double base = TimeRounds(n, elems, reps, false, ranks, run);
        const double reduce_ms = std::max(step - base, 1e-3);
        const double gbs = elems * 4.0 / (reduce_ms * 1e6);
        const double bus = gbs * 2.0 * (n - 1) / n;
        if (cluster) summary[n] = bus;
        JsonLine line;
        line.Add("mode", mode).Add("bytes", elems * 4).Add("ranks", n).Add("processes", cluster ? n : 1)
            .Add("step_ms", step).Add("baseline_ms", base).Add("reduce_ms", reduce_ms)
            .Add("gbytes_per_sec", gbs).Add("bus_gbytes_per_sec", bus);
        if (json) line.Print();
        else
          std::printf("%-7s ranks %d bytes %10lld  step %8.3f ms  baseline %8.3f ms  reduce %8.3f ms  %6.3f GB/s  bus %6.3f GB/s\n",
                      mode.c_str(), n, static_cast<long long>(elems * 4), step, base, reduce_ms, gbs, bus);
      }
    }
  }
  // The ceiling, measured here: one tensor of the largest size echoed over
  // plain loopback TCP (bytes both ways over the round trip).
  double raw_gbs = 0;
  if (!sizes.empty()) {
    sf::bench::RawEcho raw;
    Tensor t(DType::kFloat32, {std::max<int64_t>(1, sizes.back() / 4)});
    std::memset(t.raw_data(), 1, t.bytes());
    const double rtt = raw.RoundTrip(t, std::max(3, reps));
    raw_gbs = 2.0 * static_cast<double>(t.bytes()) / rtt / 1e9;
  }
  JsonLine s;
  s.Add("summary", true).Add("largest_bytes", sizes.empty() ? int64_t{0} : sizes.back() / 4 * 4)
      .Add("tls", !flags.GetBool("insecure")).Add("raw_tcp_gbytes_per_sec", raw_gbs);
  for (const auto& kv : summary) {
    s.Add("cluster_bus_gbytes_per_sec_ranks_" + std::to_string(kv.first), kv.second);
    s.Add("cluster_bus_vs_raw_tcp_ranks_" + std::to_string(kv.first), raw_gbs > 0 ? kv.second / raw_gbs : 0.0);
  }
  if (json) s.Print();
  else std::printf("%s\n", s.str().c_str());
  return 0;
}
