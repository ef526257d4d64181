// A plain TCP connection to a node, for tests that play a peer speaking
// garbage, nothing at all, or too slowly.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <string>

#include "net/peer_rpc.h"

namespace sf::testing {

// Connects to "host:port" (IPv4) with a plain socket; the descriptor, or -1.
inline int RawConnect(const std::string& address) {
  std::string host;
  uint16_t port = 0;
  if (!net::ParseAddress(address, &host, &port).ok()) return -1;
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  ::inet_pton(AF_INET, host.c_str(), &a.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

}  // namespace sf::testing
