#pragma once

/// \file port_reservation.hpp
/// A TCP port chosen for another process to listen on, kept from the
/// moment it is chosen until that process has it.

#include "ddp/launch/errors.hpp"

namespace ddp::launch {

/// Note [A port held from choice to use]
/// A port found free (bound to port 0, read back, closed) and listened on
/// later by another process is free only at the moment it was looked at: in
/// between, any connect() on the machine may take it as its source port, and
/// another job may be given it by bind(0). So the chooser keeps it: a
/// PortReservation is a socket bound to the port with SO_REUSEADDR and never
/// listening. Linux then leaves the port out of every bind(0) and every
/// connect()'s choice of source port, while a process that binds it by number
/// with SO_REUSEADDR (ddp's store, c10d's TCPStore, Gloo) still can, and
/// listens there as if it were free. ddprun reserves the workers' MASTER_PORT
/// for as long as the attempt runs; tests reserve every port they hand to a
/// launcher for as long as the test runs.
class PortReservation {
 public:
  /// Reserves a free port on every address of this machine (the socket is
  /// bound to 0.0.0.0, so the port is kept whichever address rank 0 binds).
  /// \throws ddp::LaunchError saying why no port could be reserved.
  PortReservation();
  ~PortReservation();
  PortReservation(PortReservation&& other) noexcept;
  PortReservation& operator=(PortReservation&& other) noexcept;
  PortReservation(const PortReservation&) = delete;
  PortReservation& operator=(const PortReservation&) = delete;

  /// The reserved port.
  int port() const noexcept { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

}  // namespace ddp::launch
