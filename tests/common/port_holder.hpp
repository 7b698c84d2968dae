#pragma once

// Test helper: a port on 127.0.0.1 held by a listening socket, for the
// "port already in use" cases. Not a launch::PortReservation: that one never
// listens, on purpose, so that the process it was reserved for can still bind
// the port (Note [A port held from choice to use]); this one must refuse it.

#include "comm/store/socket.hpp"

namespace ddp::testing {

class PortHolder {
 public:
  PortHolder() : socket_(comm::store::listen_on("127.0.0.1", 0)) {}

  int port() const { return comm::store::local_port(socket_); }

 private:
  comm::store::Socket socket_;
};

}  // namespace ddp::testing
