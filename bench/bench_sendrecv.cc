// Send/Recv throughput and latency for tensors of 4 bytes to 256 MiB.
//
// Three modes, each a round trip of one tensor (there and back), so latency
// and throughput come from the same timing:
// - inproc: through the step rendezvous in one process (what _Send/_Recv
//   between two partitions of one process do: the buffer is passed by
//   reference, never copied);
// - cluster: through shardflow's connection (Cap'n Proto RPC) to a
//   `shardflow node` process and back (an Echo request by net::Call: the tensor bytes
//   referenced on send, one copy on decode; the reply is copied into the
//   RPC return), once over mutual TLS ("tls": true) and once with
//   --insecure ("tls": false);
// - raw_tcp: the same bytes over a plain loopback TCP socket to a child
//   process that echoes them, measured by this program as the ceiling.
// gbytes_per_sec = 2 * bytes / round trip (both directions move the tensor).
// Keys: bytes, mode, gbytes_per_sec, round_trip_us, tls (cluster rows also
// round_trip_median_us, and per round trip client_cpu_us and node_cpu_us,
// the CPU time of this process and of the node, and context_switches of
// both: on this shared VM the wall time follows the neighbours); the summary
// compares cluster to raw_tcp at 64 MiB (targets: >= 50% with TLS, >= 80%
// without) and the small round trip with TLS (target < 100 us).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <vector>

#include "runtime/rendezvous.h"
#include "examples/common/flags.h"
#include "examples/common/json.h"
#include "examples/common/local_cluster.h"
#include "bench/process_usage.h"
#include "bench/raw_tcp_echo.h"
#include "net/peer_rpc.h"

using namespace sf;
using namespace sf::examples;
using sf::bench::RawEcho;

namespace {

using Clock = std::chrono::steady_clock;

void Die(const std::string& what) {
  std::fprintf(stderr, "bench_sendrecv: %s\n", what.c_str());
  std::exit(1);
}

// Round trips to time for a tensor of n bytes: enough to move ~1 GiB, at
// least 3 and at most max_reps.
int Reps(int64_t n, int max_reps) {
  return static_cast<int>(std::clamp<int64_t>((int64_t{1} << 30) / std::max<int64_t>(n, 1), 3, max_reps));
}

Tensor MakeTensor(int64_t bytes) {
  Tensor t(DType::kFloat32, {std::max<int64_t>(1, bytes / 4)});
  std::memset(t.raw_data(), 0x3c, t.bytes());
  return t;
}

// Seconds per round trip through the in-process rendezvous.
double InProc(const Tensor& t, int reps) {
  runtime::LocalRendezvous rdv;
  int64_t done = 0;
  const auto t0 = Clock::now();
  for (int i = 0; i < reps; ++i) {
    RendezvousKey ping{i, "a:0->/job:localhost/task:0/device:CPU:1", "", 0};
    RendezvousKey pong{i, "b:0->/job:localhost/task:0/device:CPU:0", "", 0};
    rdv.RecvAsync(ping, [&](Status s, Tensor v, bool) {
      if (!s.ok()) Die(s.ToString());
      rdv.Send(pong, std::move(v), false);
    });
    rdv.RecvAsync(pong, [&](Status s, Tensor v, bool) {
      if (!s.ok() || v.bytes() != t.bytes()) Die("inproc transfer lost its tensor");
      ++done;
    });
    rdv.Send(ping, t, false);
    rdv.Cleanup(i);
  }
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  if (done != reps) Die("inproc: " + std::to_string(done) + " of " + std::to_string(reps) + " round trips");
  return secs / reps;
}

// Echo round trips to a node process: their mean and median, and the CPU
// time and thread switches of this process and the node per round trip
// (on this shared VM wall time follows the neighbours; CPU much less).
struct ClusterTiming {
  double mean_s = 0, median_s = 0;
  double client_cpu_s = 0, node_cpu_s = 0, switches = 0;
};

ClusterTiming Cluster(const net::ConnectionPtr& c, const Tensor& t, int reps, pid_t node) {
  // net::Call, as every caller that waits for a reply does (a session's
  // steps, RemotePartitionHost): the reply is handed over on the I/O
  // thread. Request's callback would run on a handler thread, a thread
  // hop (and on this VM a wake-up) that no blocking caller pays.
  auto once = [&] {
    auto reply = net::Call(c, net::Echo{t}, 60000);
    if (!reply.ok()) Die(reply.status().ToString());
    if (reply->payload.bytes() != t.bytes()) Die("echo came back wrong");
  };
  once();  // warm: first-touch of the node's buffers
  std::vector<double> each(reps);
  const bench::ProcessUsage self0 = bench::ReadProcessUsage(), node0 = bench::ReadProcessUsage(node);
  const auto t0 = Clock::now();
  auto last = t0;
  for (int i = 0; i < reps; ++i) {
    once();
    const auto now = Clock::now();
    each[i] = std::chrono::duration<double>(now - last).count();
    last = now;
  }
  const bench::ProcessUsage self1 = bench::ReadProcessUsage(), node1 = bench::ReadProcessUsage(node);
  ClusterTiming out;
  out.mean_s = std::chrono::duration<double>(last - t0).count() / reps;
  std::nth_element(each.begin(), each.begin() + reps / 2, each.end());
  out.median_s = each[reps / 2];
  out.client_cpu_s = (self1.cpu_seconds - self0.cpu_seconds) / reps;
  out.node_cpu_s = (node1.cpu_seconds - node0.cpu_seconds) / reps;
  out.switches = (self1.context_switches - self0.context_switches + node1.context_switches - node0.context_switches) / reps;
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  flags.Int("max-bytes", int64_t{256} << 20, "largest tensor (bytes)")
      .Int("max-reps", 2000, "most round trips per size")
      .String("modes", "inproc,cluster,raw_tcp", "modes to run")
      .Bool("json", "print JSON lines");
  ParseOrExit(flags, argc, argv, "bench_sendrecv");
  KeepTensorMemoryWarm();  // as sessions and nodes do: reuse, not re-fault, big buffers
  const bool json = flags.GetBool("json");
  const std::string modes = flags.GetString("modes");
  auto want = [&](const std::string& m) { return modes.find(m) != std::string::npos; };

  std::vector<int64_t> sizes;
  for (int64_t b = 4; b <= flags.GetInt("max-bytes"); b *= 16) sizes.push_back(b);
  if (sizes.back() != flags.GetInt("max-bytes")) {
    // 64 MiB and 256 MiB are the reference points: always include them.
    for (int64_t b : {int64_t{64} << 20, int64_t{256} << 20})
      if (b <= flags.GetInt("max-bytes") && std::find(sizes.begin(), sizes.end(), b) == sizes.end())
        sizes.push_back(b);
    std::sort(sizes.begin(), sizes.end());
  }

  // One node over TLS, one --insecure: the same program measures both.
  LocalCluster clusters[2];
  std::unique_ptr<net::Endpoint> endpoints[2];
  net::ConnectionPtr conns[2];
  if (want("cluster")) {
    for (int tls = 0; tls < 2; ++tls) {
      clusters[tls].SetInsecure(tls == 0);
      Status s = clusters[tls].Start(1, 3600);
      if (!s.ok()) Die(s.ToString());
      net::EndpointOptions o;
      o.role = net::Role::kSession;
      o.insecure = tls == 0;
      o.tls_dir = clusters[tls].tls_dir();
      o.peer_timeout_ms = 30000;  // a 256 MiB echo keeps both sides busy for a while
      auto t = net::Endpoint::Create(o, nullptr, nullptr);
      if (!t.ok()) Die(t.status().ToString());
      endpoints[tls] = std::move(*t);
      auto c = endpoints[tls]->Connect(clusters[tls].addresses()[0]);
      if (!c.ok()) Die(c.status().ToString());
      conns[tls] = *c;
    }
  }
  std::optional<RawEcho> raw;
  if (want("raw_tcp")) raw.emplace();

  std::map<std::pair<std::string, int64_t>, double> rtt;
  for (int64_t bytes : sizes) {
    Tensor t = MakeTensor(bytes);
    const int reps = Reps(bytes, static_cast<int>(flags.GetInt("max-reps")));
    // (mode, tls): raw TCP and in-process have no TLS.
    const std::pair<const char*, bool> runs[] = {
        {"inproc", false}, {"cluster", true}, {"cluster", false}, {"raw_tcp", false}};
    for (const auto& [mode, tls] : runs) {
      if (!want(mode)) continue;
      double secs;
      std::optional<ClusterTiming> ct;
      if (std::string(mode) == "inproc") secs = InProc(t, reps);
      else if (std::string(mode) == "cluster") secs = (ct = Cluster(conns[tls ? 1 : 0], t, reps, clusters[tls ? 1 : 0].pid(0)))->mean_s;
      else secs = raw->RoundTrip(t, reps);
      const std::string key = std::string(mode) + (tls ? "+tls" : "");
      rtt[{key, bytes}] = secs;
      const double gbs = 2.0 * static_cast<double>(t.bytes()) / secs / 1e9;
      if (json) {
        JsonLine line;
        line.Add("bytes", static_cast<int64_t>(t.bytes())).Add("mode", mode).Add("tls", tls)
            .Add("gbytes_per_sec", gbs).Add("round_trip_us", secs * 1e6).Add("reps", reps);
        if (ct) {
          line.Add("round_trip_median_us", ct->median_s * 1e6).Add("client_cpu_us", ct->client_cpu_s * 1e6)
              .Add("node_cpu_us", ct->node_cpu_s * 1e6).Add("context_switches", ct->switches);
        }
        line.Print();
      } else {
        std::printf("%-12s %12lld bytes  %9.3f GB/s  %11.1f us round trip\n", key.c_str(),
                    static_cast<long long>(t.bytes()), gbs, secs * 1e6);
      }
    }
  }
  for (auto& c : conns)
    if (c) c->Close();
  for (auto& e : endpoints)
    if (e) e->Shutdown();

  const int64_t big = int64_t{64} << 20;
  auto get = [&](const char* m, int64_t b) {
    auto it = rtt.find({m, b});
    return it == rtt.end() ? 0.0 : it->second;
  };
  auto vs_raw = [&](const char* key) {
    return get(key, big) > 0 && get("raw_tcp", big) > 0 ? get("raw_tcp", big) / get(key, big) : 0;
  };
  const double ratio_tls = vs_raw("cluster+tls"), ratio_plain = vs_raw("cluster");
  const double small_us = get("cluster+tls", 4) * 1e6, small_plain_us = get("cluster", 4) * 1e6;
  if (json) {
    JsonLine().Add("summary", true).Add("cluster_vs_raw_tcp_64mib", ratio_tls)
        .Add("cluster_insecure_vs_raw_tcp_64mib", ratio_plain)
        .Add("cluster_small_round_trip_us", small_us).Add("cluster_insecure_small_round_trip_us", small_plain_us)
        .Add("meets_throughput_target", ratio_tls >= 0.5 && ratio_plain >= 0.8)
        .Add("meets_latency_target", small_us > 0 && small_us < 100)
        .Print();
  } else {
    std::printf("cluster / raw TCP at 64 MiB: %.2f with TLS (target >= 0.5), %.2f insecure (target >= 0.8);\n"
                "small round trip %.1f us with TLS (target < 100), %.1f us insecure\n",
                ratio_tls, ratio_plain, small_us, small_plain_us);
  }
  return 0;
}
