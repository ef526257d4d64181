// The ceiling the network benchmarks compare against: a child process that
// echoes length-prefixed messages over plain loopback TCP, timed by the
// benchmark itself (bench_sendrecv, bench_allreduce).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "shardflow/tensor.h"

namespace sf::bench {

[[noreturn]] inline void RawTcpDie(const char* what) {
  std::fprintf(stderr, "%s\n", what);
  std::exit(1);
}

inline bool ReadAll(int fd, void* p, size_t n) {
  auto* b = static_cast<uint8_t*>(p);
  while (n > 0) {
    ssize_t r = ::read(fd, b, n);
    if (r <= 0) return false;
    b += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

inline bool WriteAll(int fd, const void* p, size_t n) {
  auto* b = static_cast<const uint8_t*>(p);
  while (n > 0) {
    ssize_t w = ::write(fd, b, n);
    if (w <= 0) return false;
    b += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// A child process that echoes length-prefixed messages on loopback TCP;
// RoundTrip returns the seconds of one round trip of t (mean of reps).
struct RawEcho {
  pid_t pid = -1;
  int fd = -1;
  std::vector<uint8_t> back;
  RawEcho() {
    int ls = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof sa;
    if (::bind(ls, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 || ::listen(ls, 1) != 0 ||
        ::getsockname(ls, reinterpret_cast<sockaddr*>(&sa), &len) != 0)
      RawTcpDie("raw_tcp: cannot listen on 127.0.0.1");
    pid = ::fork();
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      int c = ::accept(ls, nullptr, nullptr);
      int one = 1;
      ::setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      std::vector<uint8_t> buf;
      uint64_t n;
      while (ReadAll(c, &n, sizeof n)) {
        buf.resize(n);
        if (!ReadAll(c, buf.data(), n) || !WriteAll(c, buf.data(), n)) break;
      }
      ::_exit(0);
    }
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) RawTcpDie("raw_tcp: connect");
    ::close(ls);
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  ~RawEcho() {
    ::close(fd);
    int st;
    ::waitpid(pid, &st, 0);
  }
  double RoundTrip(const Tensor& t, int reps) {
    const uint64_t n = t.bytes();
    back.resize(n);
    auto once = [&] {
      if (!WriteAll(fd, &n, sizeof n) || !WriteAll(fd, t.raw_data(), n) || !ReadAll(fd, back.data(), n))
        RawTcpDie("raw_tcp: echo failed");
    };
    once();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) once();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
  }
};

}  // namespace sf::bench
