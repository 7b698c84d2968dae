// link_router: the "switch" of the simulated cluster that benchmarks/cluster/cluster.sh builds.
//
// Every node of the cluster is a network namespace holding one TUN device, ddp0, with address
// 10.77.0.(i+1)/24 for node i. This program owns the other end of all of them: it reads each
// IPv4 packet a node sends, holds it for the one-way delay, then writes it into the TUN of the
// node that owns the destination address (last octet - 1 = node index). Bandwidth is not shaped
// here but by a tbf qdisc on each node's ddp0, so what reaches the router already left the node at
// the link rate. The TUN devices are not persistent: they vanish when this process exits.
//
// Usage: link_router --delay-us D --ready-file F NS0 NS1 ...
//   NSi is a namespace made by `ip netns add NSi` (/run/netns/NSi). F is written once every TUN
//   exists. SIGTERM or SIGINT (or the death of the parent) ends it; it then prints one line of
//   counters to stderr. Errors exit with code 2.
//
// Standalone C++17, libc only. Build: g++ -O2 -std=c++17 -Wall -Wextra -o link_router
// link_router.cpp

#include <errno.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <vector>

namespace {

// Note [Large MTU]
// cluster.sh gives ddp0 an MTU of 65000. TUN has no segmentation offload, so the kernel hands us
// one packet per MTU-sized segment; at 64 KB a 10 Gbit/s stream is ~19k packets/s, which one
// userspace thread on a 2-core machine can copy twice (read + write) with time to spare. At MTU
// 1500 it would be ~830k packets/s, which it cannot. Slots are therefore 64 KiB.
constexpr size_t kSlotBytes = 65536;
// Note [Slot pool]
// Packets live in a preallocated pool of fixed slots (no malloc per packet). The pool is mmap'ed
// with MAP_NORESERVE, and free slots are reused last-in first-out, so only the slots ever in
// flight at once are touched: 4096 slots reserve 256 MiB of address space but cost only
// (peak packets in flight) x 64 KiB of memory. When the pool is full we stop reading until the
// head is released; the nodes' TUN queues (txqueuelen) and qdiscs then hold the backlog.
constexpr uint32_t kSlots = 4096;
constexpr int kReadBatch = 64;         // Packets read from one TUN per wakeup (fairness).
constexpr uint64_t kRetryNs = 50'000;  // Wait before retrying a write that returned EAGAIN.
constexpr uint8_t kSubnet[3] = {10, 77, 0};

struct Packet {
  uint64_t due_ns;  // Arrival time + delay, CLOCK_MONOTONIC.
  uint32_t len;
  uint16_t dst;  // Node index.
  uint16_t slot;
};

volatile sig_atomic_t g_stop = 0;

void on_signal(int) { g_stop = 1; }

[[noreturn]] void die(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  fputs("link_router: ", stderr);
  vfprintf(stderr, fmt, args);
  fputc('\n', stderr);
  va_end(args);
  exit(2);
}

uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000u + uint64_t(ts.tv_nsec);
}

// Creates ddp0 inside namespace `ns` and returns its file descriptor. A TUN device belongs to the
// namespace its /dev/net/tun was opened in, so we enter `ns`, open, and return to `home`.
int open_tun_in(const std::string& ns, int home) {
  const std::string path = "/run/netns/" + ns;
  int ns_fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (ns_fd < 0)
    die("cannot open %s: %s (create it with `ip netns add %s`)", path.c_str(), strerror(errno),
        ns.c_str());
  if (setns(ns_fd, CLONE_NEWNET) != 0)
    die("cannot enter network namespace %s: %s (run as root)", ns.c_str(), strerror(errno));
  close(ns_fd);
  int fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    die("cannot open /dev/net/tun: %s (load the tun module or run as root)", strerror(errno));
  ifreq ifr;
  memset(&ifr, 0, sizeof(ifr));
  ifr.ifr_flags = IFF_TUN | IFF_NO_PI;
  strncpy(ifr.ifr_name, "ddp0", IFNAMSIZ - 1);
  if (ioctl(fd, TUNSETIFF, &ifr) != 0)
    die("cannot create TUN device ddp0 in namespace %s: %s (is another link_router serving it?)",
        ns.c_str(), strerror(errno));
  if (setns(home, CLONE_NEWNET) != 0)
    die("cannot return to the original network namespace: %s", strerror(errno));
  return fd;
}

void write_ready_file(const std::string& path) {
  const std::string tmp = path + ".tmp";
  FILE* f = fopen(tmp.c_str(), "w");
  if (f == nullptr || fputs("ready\n", f) < 0 || fclose(f) != 0 ||
      rename(tmp.c_str(), path.c_str()))
    die("cannot write ready file %s: %s", path.c_str(), strerror(errno));
}

}  // namespace

int main(int argc, char** argv) {
  const pid_t parent = getppid();
  // Dies with the script that started it, so a SIGKILLed benchmark leaves no router behind (the
  // TUN devices go with it; cluster.sh's sweep removes the namespaces).
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != parent) return 0;  // The parent died before prctl.
  // Note [Timer slack]
  // Sleeps end up to timer_slack_ns (50 us by default) late; with a 200 us delay that is a 25%
  // error. 1 ns makes ppoll wake when the head packet is due.
  prctl(PR_SET_TIMERSLACK, 1);

  long delay_us = -1;
  std::string ready_file;
  std::vector<std::string> namespaces;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--delay-us" && i + 1 < argc) {
      char* end = nullptr;
      delay_us = strtol(argv[++i], &end, 10);
      if (*end != '\0' || delay_us < 0) die("--delay-us wants a number >= 0, got %s", argv[i]);
    } else if (arg == "--ready-file" && i + 1 < argc) {
      ready_file = argv[++i];
    } else if (arg.rfind("--", 0) == 0) {
      die("unknown option %s", arg.c_str());
    } else {
      namespaces.push_back(arg);
    }
  }
  if (delay_us < 0 || ready_file.empty() || namespaces.empty() || namespaces.size() > 254)
    die("usage: link_router --delay-us D --ready-file F NS0 NS1 ... (1 to 254 namespaces)");
  const uint64_t delay_ns = uint64_t(delay_us) * 1000u;
  const size_t nodes = namespaces.size();

  // Signals are blocked except inside ppoll, so a stop request can't slip in between the check
  // of g_stop and the wait.
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_signal;
  sigaction(SIGTERM, &sa, nullptr);
  // Note [Inherited SIGINT]
  // bash starts background commands of a script with SIGINT ignored, so that Ctrl-C reaches the
  // script (whose trap then stops us with SIGTERM) but not its helpers. Keep that: a Ctrl-C must
  // not take the network away from the script's other processes before its trap runs.
  struct sigaction old_int;
  sigaction(SIGINT, nullptr, &old_int);
  if (old_int.sa_handler != SIG_IGN) sigaction(SIGINT, &sa, nullptr);
  sigset_t blocked, wait_mask;
  sigemptyset(&blocked);
  sigaddset(&blocked, SIGTERM);
  sigaddset(&blocked, SIGINT);
  sigprocmask(SIG_BLOCK, &blocked, &wait_mask);
  sigdelset(&wait_mask, SIGTERM);
  sigdelset(&wait_mask, SIGINT);

  const int home = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
  if (home < 0) die("cannot open /proc/self/ns/net: %s (is /proc mounted?)", strerror(errno));
  std::vector<pollfd> fds(nodes);
  for (size_t i = 0; i < nodes; ++i) fds[i] = {open_tun_in(namespaces[i], home), 0, 0};
  close(home);

  void* pool_mem = mmap(nullptr, kSlots * kSlotBytes, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (pool_mem == MAP_FAILED) die("cannot map the packet pool: %s", strerror(errno));
  auto* pool = static_cast<uint8_t*>(pool_mem);
  std::vector<Packet> fifo(kSlots);  // Ring: fifo[(head + k) % kSlots], k < count.
  std::vector<uint16_t> free_slots(kSlots);
  for (uint32_t i = 0; i < kSlots; ++i) free_slots[i] = uint16_t(kSlots - 1 - i);
  uint32_t n_free = kSlots, head = 0, count = 0;
  uint64_t forwarded = 0, bytes = 0, non_ipv4 = 0, unknown_dst = 0, write_errors = 0;

  write_ready_file(ready_file);

  // Note [One FIFO]
  // Every packet is held for the same delay, so release order is arrival order and one FIFO over
  // all links is enough: the head is always the next packet due. A write that fails with EAGAIN
  // keeps its packet at the head (a full link stalls the switch briefly rather than dropping).
  while (!g_stop) {
    uint64_t now = now_ns();
    bool retry = false;
    while (count > 0 && fifo[head].due_ns <= now) {
      const Packet& p = fifo[head];
      if (write(fds[p.dst].fd, pool + size_t(p.slot) * kSlotBytes, p.len) < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS) {
          retry = true;
          break;
        }
        ++write_errors;  // E.g. EIO before cluster.sh has brought the destination's ddp0 up.
      } else {
        ++forwarded;
        bytes += p.len;
      }
      free_slots[n_free++] = p.slot;
      head = (head + 1) % kSlots;
      --count;
    }

    timespec timeout{0, 0};
    const timespec* timeout_ptr = nullptr;  // Nothing held: wait for a packet or a signal.
    if (count > 0) {
      const uint64_t wake = retry ? now + kRetryNs : fifo[head].due_ns;
      const uint64_t wait = wake > now ? wake - now : 0;
      timeout.tv_sec = time_t(wait / 1'000'000'000u);
      timeout.tv_nsec = long(wait % 1'000'000'000u);
      timeout_ptr = &timeout;
    }
    const short events = n_free > 0 ? POLLIN : 0;  // Pool full: only wait for the head.
    for (pollfd& p : fds) p.events = events;
    const int ready = ppoll(fds.data(), fds.size(), timeout_ptr, &wait_mask);
    if (ready < 0) {
      if (errno == EINTR) continue;
      die("ppoll failed: %s", strerror(errno));
    }
    for (size_t i = 0; i < nodes && ready > 0; ++i) {
      if (fds[i].revents & (POLLERR | POLLNVAL))
        die("TUN device of %s failed", namespaces[i].c_str());
      if (!(fds[i].revents & POLLIN)) continue;
      for (int k = 0; k < kReadBatch && n_free > 0; ++k) {
        const uint16_t slot = free_slots[n_free - 1];
        uint8_t* data = pool + size_t(slot) * kSlotBytes;
        const ssize_t len = read(fds[i].fd, data, kSlotBytes);
        if (len < 0) {
          if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) break;
          die("cannot read from the TUN device of %s: %s", namespaces[i].c_str(), strerror(errno));
        }
        now = now_ns();
        if (len < 20 || (data[0] >> 4) != 4) {
          ++non_ipv4;
          continue;
        }
        const uint8_t* dst = data + 16;  // IPv4 destination address.
        if (memcmp(dst, kSubnet, 3) != 0 || dst[3] == 0 || size_t(dst[3] - 1) >= nodes) {
          ++unknown_dst;
          continue;
        }
        --n_free;
        fifo[(head + count) % kSlots] = {now + delay_ns, uint32_t(len), uint16_t(dst[3] - 1), slot};
        ++count;
      }
    }
  }

  fprintf(stderr,
          "link_router: forwarded %llu packets, %llu bytes; dropped %llu (non-IPv4 %llu, unknown "
          "destination %llu, write errors %llu); %u still held\n",
          (unsigned long long)forwarded, (unsigned long long)bytes,
          (unsigned long long)(non_ipv4 + unknown_dst + write_errors), (unsigned long long)non_ipv4,
          (unsigned long long)unknown_dst, (unsigned long long)write_errors, count);
  return 0;
}
