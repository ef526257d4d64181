// A fake etcd for tests of what a hostile or broken peer may answer: a
// plaintext HTTP server on a free 127.0.0.1 port that answers every request
// with the same bytes (garbage, a malformed reply, a huge body) and closes
// the connection.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <string>
#include <thread>

namespace sf::testing {

class FakeHttpServer {
 public:
  explicit FakeHttpServer(std::string response) : response_(std::move(response)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd_, 16) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0)
      std::abort();
    endpoint_ = "127.0.0.1:" + std::to_string(ntohs(a.sin_port));
    thread_ = std::thread([this] { Serve(); });
  }
  ~FakeHttpServer() {
    stop_ = true;
    ::shutdown(fd_, SHUT_RDWR);  // wakes accept()
    thread_.join();
    ::close(fd_);
  }
  const std::string& endpoint() const { return endpoint_; }
  int requests() const { return requests_.load(); }

 private:
  void Serve() {
    while (!stop_) {
      const int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) return;
      std::string in;
      char buf[4096];
      // The request's headers and its body (Content-Length), then the answer.
      size_t need = std::string::npos;
      for (;;) {
        const ssize_t n = ::recv(c, buf, sizeof buf, 0);
        if (n <= 0) break;
        in.append(buf, static_cast<size_t>(n));
        const size_t end = in.find("\r\n\r\n");
        if (end != std::string::npos && need == std::string::npos) {
          const size_t cl = in.find("Content-Length: ");
          need = end + 4 + (cl != std::string::npos && cl < end ? std::strtoul(in.c_str() + cl + 16, nullptr, 10) : 0);
        }
        if (need != std::string::npos && in.size() >= need) break;
      }
      ++requests_;
      size_t sent = 0;
      while (sent < response_.size()) {
        const ssize_t n = ::send(c, response_.data() + sent, response_.size() - sent, MSG_NOSIGNAL);
        if (n <= 0) break;  // the client gave up reading (a body over its limit)
        sent += static_cast<size_t>(n);
      }
      ::close(c);
    }
  }

  const std::string response_;
  int fd_ = -1;
  std::string endpoint_;
  std::atomic<bool> stop_{false};
  std::atomic<int> requests_{0};
  std::thread thread_;
};

}  // namespace sf::testing
