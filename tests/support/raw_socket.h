// Plain sockets for tests that play a peer speaking garbage, nothing at
// all, or too slowly, and addresses where no node answers.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <string>

#include "net/peer_rpc.h"

namespace sf::testing {

// Connects to "host:port" (IPv4) with a plain socket, from local IP `from`
// when given (any 127.x.y.z is loopback on Linux: another source address for
// a node's per-address caps); the descriptor, or -1.
inline int RawConnect(const std::string& address, const std::string& from = "") {
  std::string host;
  uint16_t port = 0;
  if (!net::ParseAddress(address, &host, &port).ok()) return -1;
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  if (!from.empty()) {
    ::inet_pton(AF_INET, from.c_str(), &a.sin_addr);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      ::close(fd);
      return -1;
    }
  }
  a.sin_port = htons(port);
  ::inet_pton(AF_INET, host.c_str(), &a.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// A socket listening on 127.0.0.1 (ephemeral port) that never accepts:
// connections to it complete and then hear nothing. Its descriptor (the
// caller closes it), or -1; *address gets "127.0.0.1:port".
inline int RawListen(std::string* address) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, 16) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    ::close(fd);
    return -1;
  }
  *address = "127.0.0.1:" + std::to_string(ntohs(a.sin_port));
  return fd;
}

// "127.0.0.1:port" where nothing listens (a port just bound and released).
inline std::string UnusedAddress() {
  std::string address;
  const int fd = RawListen(&address);
  if (fd >= 0) ::close(fd);
  return address;
}

// The all-reduce announcement "rank `rank` of group `key` (of group_size
// ranks) runs at `address`", as a node sends it to its peers.
inline net::CollectiveAnnounce Announcement(const std::string& key, int64_t group_size, int64_t rank,
                                            const std::string& address) {
  net::CollectiveAnnounce a;
  a.group_key = key;
  a.group_size = group_size;
  a.from_rank = rank;
  a.address = address;
  return a;
}

// An authenticated peer a test plays: a connection to address with the
// role's credentials from tls_dir, over an endpoint kept in *endpoint (it
// must outlive the connection). The endpoint's or the dial's error.
inline Result<net::ConnectionPtr> ConnectAs(net::Role role, const std::string& tls_dir, const std::string& address,
                                            std::unique_ptr<net::Endpoint>* endpoint) {
  net::EndpointOptions o;
  o.role = role;
  o.tls_dir = tls_dir;
  SF_ASSIGN_OR_RETURN(*endpoint, net::Endpoint::Create(o, nullptr, nullptr));
  return (*endpoint)->Connect(address);
}

}  // namespace sf::testing
