#pragma once

// Test helper: a port on 127.0.0.1 held by a listening socket, for the
// "port already in use" cases.

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <stdexcept>

namespace ddp::testing {

class PortHolder {
 public:
  PortHolder() : fd_(socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof(address);
    if (fd_ < 0 || bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
        listen(fd_, 1) != 0 ||
        getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
      throw std::runtime_error("PortHolder: cannot listen on a loopback port");
    }
    port_ = ntohs(address.sin_port);
  }
  ~PortHolder() { close(fd_); }
  PortHolder(const PortHolder&) = delete;
  PortHolder& operator=(const PortHolder&) = delete;

  int port() const { return port_; }

 private:
  int fd_;
  int port_ = 0;
};

}  // namespace ddp::testing
