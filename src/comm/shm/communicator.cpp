#include "comm/shm/communicator.hpp"

#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <new>

#include "base/str.hpp"
#include "comm/store/store_value.hpp"
#include "ddp/base/errors.hpp"

namespace ddp::comm::shm {
namespace {

// Note [Rounds through double-buffered slots]
// Every rank owns two staging slots in the segment. A collective moves its
// data in rounds of at most one slot; round k uses slot k % 2 of every rank.
// Each round writes the slots, meets at a barrier, then reads them; a rank's
// reads of round k end before it reaches the barrier of round k + 1, which
// every rank must pass before it writes round k + 2 into the same slot. So
// one barrier per phase suffices and no rank overwrites data a peer still
// reads. All-reduce of a round (R elements, n ranks, shares of about R/n):
//   1. each rank copies the shares it does not own into its slot;
//   2. barrier;
//   3. rank r folds share r of every rank (its own from its tensor, the
//      others' from their slots), in rank order, into its slot, and copies
//      the result into its tensor;
//   4. barrier;
//   5. each rank copies the peers' reduced shares into its tensor.
// Every element is combined by exactly one rank, so all ranks hold the same
// bits; a rank never stages its own share, which saves about a third of
// the memory traffic of staging everything.

constexpr uint64_t kMagic = 0x3147424d48535044ull;  // "DDPSHMB1"
constexpr uint32_t kVersion = 2;                    // 2: RankControl::left
constexpr size_t kHeaderBytes = 256;                // Header line, wake word.
constexpr int64_t kShareAlignment = 64;             // Bytes; one cache line.

struct alignas(128) Header {
  uint64_t magic;
  uint32_t version;
  uint32_t world;
  uint64_t slot_bytes;
};
static_assert(sizeof(Header) <= 128);

size_t control_offset() { return kHeaderBytes; }
size_t data_offset(int world) {
  const size_t end = kHeaderBytes + sizeof(RankControl) * static_cast<size_t>(world);
  return (end + 4095) / 4096 * 4096;
}
size_t segment_bytes(int world, size_t slot_bytes) {
  return data_offset(world) + static_cast<size_t>(world) * 2 * slot_bytes;
}

// Note [Staging slots fit in /dev/shm]
// Containers often mount a small /dev/shm (Docker: 64 MiB). Rank 0 halves
// the slots until the segment takes at most half of the free space, down to
// 64 KiB: smaller slots mean more rounds, not failure.
size_t fitting_slot_bytes(int world, size_t wanted) {
  struct statvfs info {};
  if (statvfs("/dev/shm", &info) != 0) return wanted;
  const auto free_bytes = static_cast<size_t>(info.f_bavail) * info.f_frsize;
  size_t slot = wanted;
  while (slot > (size_t{64} << 10) && segment_bytes(world, slot) > free_bytes / 2) slot /= 2;
  return slot;
}

// The boundaries of n shares of `count` elements: share j is
// [bound(j), bound(j + 1)), cache-line aligned, possibly empty at the end.
struct Shares {
  int64_t per;
  int64_t count;
  int64_t bound(int j) const { return std::min(count, per * j); }
  int64_t length(int j) const { return bound(j + 1) - bound(j); }
};
Shares split_into_shares(int64_t count, int n, int element_size) {
  const int64_t align = std::max<int64_t>(1, kShareAlignment / element_size);
  int64_t per = (count + n - 1) / n;
  per = (per + align - 1) / align * align;
  return Shares{std::max<int64_t>(per, 1), count};
}

}  // namespace

Communicator::Communicator(c10d::Store& store, CommunicatorOptions options)
    : options_(std::move(options)) {
  const int world = size();
  if (options_.rank == 0) {
    sweep_stale_segments();
    options_.slot_bytes = fitting_slot_bytes(world, options_.slot_bytes);
    const size_t bytes = segment_bytes(world, options_.slot_bytes);
    segment_ = Segment::create(fresh_segment_name(), bytes);
    new (segment_.data())
        Header{kMagic, kVersion, static_cast<uint32_t>(world), options_.slot_bytes};
    store.set("shm/segment",
              store::as_bytes(base::detail::str(segment_.name(), " ", options_.slot_bytes)));
  } else {
    store.wait({"shm/segment"}, options_.timeout);
    const std::string announced = store::as_text(store.get("shm/segment"));
    const std::string name = announced.substr(0, announced.find(' '));
    options_.slot_bytes = std::stoull(announced.substr(announced.find(' ') + 1));
    segment_ = Segment::open(name, segment_bytes(world, options_.slot_bytes));
    const auto* header = reinterpret_cast<const Header*>(segment_.data());
    if (header->magic != kMagic || header->version != kVersion ||
        header->world != static_cast<uint32_t>(world) ||
        header->slot_bytes != options_.slot_bytes) {
      throw BackendUnavailableError(base::detail::str(
          "shared memory '", name, "' was laid out for ", header->world, " ranks (format ",
          header->version, "), not ", world,
          ": the ranks of this node run different ddp builds or disagree on the world "
          "size. Start them identically."));
    }
  }
  controls_ = reinterpret_cast<RankControl*>(segment_.data() + control_offset());
  data_ = segment_.data() + data_offset(world);
  wake_ = reinterpret_cast<WakeWord*>(segment_.data() + 128);
  RankControl& own = controls_[options_.rank];
  own.pid.store(getpid());
  own.pid_namespace.store(current_pid_namespace());
  barrier_.emplace(controls_, wake_, options_.rank, options_.global_ranks);

  // The creator unlinks the name once every rank has mapped the segment
  // (Note [Shared-memory segments never outlive their job]).
  store.set(base::detail::str("shm/mapped/", options_.rank), store::as_bytes("1"));
  if (options_.rank == 0) {
    std::vector<std::string> keys;
    for (int r = 0; r < world; ++r) keys.push_back(base::detail::str("shm/mapped/", r));
    try {
      store.wait(keys, options_.timeout);
    } catch (const std::exception& error) {
      segment_.unlink();
      throw RendezvousError(base::detail::str(
          "the shared-memory segment of this node was not mapped by every local rank within ",
          options_.timeout.count(), " ms (", error.what(),
          "); a rank may have failed at start-up."));
    }
    segment_.unlink();
  }
}

Communicator::~Communicator() {
  if (barrier_) barrier_->leave();
}

char* Communicator::slot(int rank, uint64_t round) const {
  return data_ + (static_cast<size_t>(rank) * 2 + round % 2) * options_.slot_bytes;
}

void Communicator::begin(const Stamp& stamp) {
  deadline_ = std::chrono::steady_clock::now() + options_.timeout;
  stamp_ = stamp;
  auto& line = controls_[options_.rank].stamps[collectives_ % 2];
  line[0].store(stamp.kind, std::memory_order_relaxed);
  line[1].store(stamp.type_and_op, std::memory_order_relaxed);
  line[2].store(stamp.count, std::memory_order_relaxed);
  line[3].store(stamp.root, std::memory_order_relaxed);
  first_meeting_ = true;
}

void Communicator::meet(const Describe& describe) {
  barrier_->arrive_and_wait(deadline_, describe, options_.timeout);
  if (first_meeting_) {
    first_meeting_ = false;
    check_stamps(describe);
  }
}

// Note [Every rank checks that the others issued the same collective]
// A rank that issues a different collective (another size, dtype, op or
// root) would otherwise read garbage or wait forever. The stamps of
// collective k live in line k % 2: no rank can write collective k + 2's
// stamp before passing a barrier of collective k + 1, which it cannot do
// before every rank has finished checking collective k.
void Communicator::check_stamps(const Describe& describe) {
  const auto parity = collectives_ % 2;
  for (int r = 0; r < size(); ++r) {
    const auto& line = controls_[r].stamps[parity];
    const Stamp theirs{
        line[0].load(std::memory_order_relaxed), line[1].load(std::memory_order_relaxed),
        line[2].load(std::memory_order_relaxed), line[3].load(std::memory_order_relaxed)};
    if (std::memcmp(&theirs, &stamp_, sizeof(Stamp)) != 0) {
      throw CollectiveError(
          base::detail::str(describe(), " does not match rank ", options_.global_ranks[r],
                            "'s collective number ", collectives_ + 1,
                            " (another kind, size, dtype, op or root). All ranks must "
                            "issue the same collectives in the same order."));
    }
  }
}

void Communicator::all_reduce(void* data, int64_t n, ElementType type, Combine combine,
                              bool average, const Describe& describe) {
  const int world = size();
  const int me = options_.rank;
  const int element = element_size(type);
  begin({1, static_cast<uint64_t>(type) << 8 | static_cast<uint64_t>(combine) << 1 | average,
         static_cast<uint64_t>(n), 0});
  char* tensor = static_cast<char*>(data);
  const int64_t capacity = static_cast<int64_t>(options_.slot_bytes) / element;
  std::vector<const void*> sources(world);
  int64_t base = 0;
  do {
    const int64_t count = std::min(capacity, n - base);
    const Shares shares = split_into_shares(count, world, element);
    char* mine = slot(me, rounds_);
    char* chunk = tensor + base * element;
    // 1. Stage the shares other ranks reduce (everything but my own).
    copy_bytes(mine, chunk, shares.bound(me) * element);
    copy_bytes(mine + shares.bound(me + 1) * element, chunk + shares.bound(me + 1) * element,
               (count - shares.bound(me + 1)) * element);
    meet(describe);
    // 3. Fold share `me` of every rank, in rank order, into my slot (where
    //    the others collect it) and copy it into my tensor.
    const int64_t offset = shares.bound(me) * element;
    if (shares.length(me) > 0) {
      for (int r = 0; r < world; ++r)
        sources[r] = r == me ? chunk + offset : slot(r, rounds_) + offset;
      reduce(type, combine, mine + offset, chunk + offset, sources.data(), world, shares.length(me),
             average ? world : 1);
    }
    meet(describe);
    // 5. Collect the shares the others reduced.
    for (int r = 0; r < world; ++r) {
      if (r == me || shares.length(r) == 0) continue;
      copy_bytes(chunk + shares.bound(r) * element, slot(r, rounds_) + shares.bound(r) * element,
                 shares.length(r) * element);
    }
    ++rounds_;
    base += count;
  } while (base < n);
  ++collectives_;
}

void Communicator::broadcast(void* data, int64_t bytes, int root, const Describe& describe) {
  begin({2, 0, static_cast<uint64_t>(bytes), static_cast<uint64_t>(root)});
  char* tensor = static_cast<char*>(data);
  const auto capacity = static_cast<int64_t>(options_.slot_bytes);
  int64_t base = 0;
  do {
    const int64_t count = std::min(capacity, bytes - base);
    if (options_.rank == root) copy_bytes(slot(root, rounds_), tensor + base, count);
    meet(describe);
    if (options_.rank != root) copy_bytes(tensor + base, slot(root, rounds_), count);
    ++rounds_;
    base += count;
  } while (base < bytes);
  ++collectives_;
}

void Communicator::all_gather(void* output, const void* input, int64_t bytes,
                              const Describe& describe) {
  begin({3, 0, static_cast<uint64_t>(bytes), 0});
  const char* in = static_cast<const char*>(input);
  char* out = static_cast<char*>(output);
  const auto capacity = static_cast<int64_t>(options_.slot_bytes);
  int64_t base = 0;
  do {
    const int64_t count = std::min(capacity, bytes - base);
    copy_bytes(slot(options_.rank, rounds_), in + base, count);
    meet(describe);
    for (int r = 0; r < size(); ++r) {
      const char* from = r == options_.rank ? in + base : slot(r, rounds_);
      copy_bytes(out + r * bytes + base, from, count);
    }
    ++rounds_;
    base += count;
  } while (base < bytes);
  ++collectives_;
}

void Communicator::reduce_scatter(void* output, const void* input, int64_t n, ElementType type,
                                  Combine combine, bool average, const Describe& describe) {
  const int world = size();
  const int me = options_.rank;
  const int element = element_size(type);
  begin({4, static_cast<uint64_t>(type) << 8 | static_cast<uint64_t>(combine) << 1 | average,
         static_cast<uint64_t>(n), 0});
  const char* in = static_cast<const char*>(input);
  char* out = static_cast<char*>(output);
  const int64_t capacity =
      std::max<int64_t>(1, static_cast<int64_t>(options_.slot_bytes) / element / world);
  std::vector<const void*> sources(world);
  int64_t base = 0;
  do {
    const int64_t count = std::min(capacity, n - base);
    char* mine = slot(me, rounds_);
    // Region j of my slot holds this round's slice of my chunk j.
    for (int j = 0; j < world; ++j) {
      if (j == me) continue;
      copy_bytes(mine + j * count * element, in + (j * n + base) * element, count * element);
    }
    meet(describe);
    for (int r = 0; r < world; ++r) {
      sources[r] =
          r == me ? in + (me * n + base) * element : slot(r, rounds_) + me * count * element;
    }
    reduce(type, combine, out + base * element, nullptr, sources.data(), world, count,
           average ? world : 1);
    ++rounds_;
    base += count;
  } while (base < n);
  ++collectives_;
}

void Communicator::barrier(const Describe& describe) {
  begin({5, 0, 0, 0});
  meet(describe);
  ++rounds_;
  ++collectives_;
}

}  // namespace ddp::comm::shm
