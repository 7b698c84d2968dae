#include "ddp/launch/port_reservation.hpp"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include "ddp/launch/errors.hpp"

namespace ddp::launch {

PortReservation::PortReservation() {
  const std::string prefix = "cannot reserve a free TCP port: ";
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_ANY);
  fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0) {
    throw LaunchError(prefix + "socket() failed (" + std::strerror(errno) +
                      "). The process may have run out of file descriptors; raise `ulimit -n`.");
  }
  const int one = 1;
  socklen_t length = sizeof(address);
  if (setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
      bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    const int error = errno;
    close(fd_);
    throw LaunchError(prefix + "binding port 0 failed (" + std::strerror(error) +
                      "). The machine may have no free port left; stop some jobs.");
  }
  port_ = ntohs(address.sin_port);
}

PortReservation::~PortReservation() {
  if (fd_ >= 0) close(fd_);
}

PortReservation::PortReservation(PortReservation&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), port_(std::exchange(other.port_, 0)) {}

PortReservation& PortReservation::operator=(PortReservation&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    port_ = std::exchange(other.port_, 0);
  }
  return *this;
}

}  // namespace ddp::launch
