#include "comm/flight_recorder/ring.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>

#include "ddp/base/errors.hpp"

namespace ddp::comm::flight_recorder::detail {

// The file's layout (Note [The ring's file]); plain integers, accessed
// atomically with the compiler's builtins where another process may read.
struct RingHeader {
  char magic[8];
  int32_t capacity;
  int32_t slot_size;
  int32_t rank;
  int32_t world_size;
  int64_t pid;
  uint64_t tickets;  // handed out so far
  char reserved[24];
};
struct RingSlot {
  uint64_t ticket;  // 0 while being written
  int64_t sequence;
  int32_t group;
  int32_t state;
  int64_t numel;
  int64_t bytes;
  int64_t start_us;
  int64_t duration_us;
  char operation[32];
  char dtype[16];
  char name[88];
};
static_assert(sizeof(RingHeader) == 64, "the file's header is 64 bytes");
static_assert(sizeof(RingSlot) == 192, "the file's slots are 192 bytes");

namespace {

constexpr char kMagic[8] = {'D', 'D', 'P', 'F', 'R', '0', '1', '\0'};
constexpr size_t kRingBytes = sizeof(RingHeader) + kCapacity * sizeof(RingSlot);

template <size_t N>
void copy_text(char (&to)[N], const std::string& from) {
  const size_t n = std::min(from.size(), N - 1);
  std::memcpy(to, from.data(), n);
  std::memset(to + n, 0, N - n);
}

template <size_t N>
std::string text_of(const char (&from)[N]) {
  return std::string(from, strnlen(from, N));
}

Entry entry_of(const RingSlot& slot) {
  Entry entry;
  entry.sequence = slot.sequence;
  entry.group = slot.group;
  entry.operation = text_of(slot.operation);
  entry.name = text_of(slot.name);
  entry.dtype = text_of(slot.dtype);
  entry.numel = slot.numel;
  entry.bytes = slot.bytes;
  entry.start_time = static_cast<double>(slot.start_us) / 1e6;
  entry.duration = static_cast<double>(slot.duration_us) / 1e6;
  const int32_t state = slot.state;
  entry.state = state >= 1 && state <= 4 ? static_cast<State>(state) : State::kIssued;
  return entry;
}

void initialize(char* memory) {
  auto* header = reinterpret_cast<RingHeader*>(memory);
  std::memcpy(header->magic, kMagic, sizeof(kMagic));
  header->capacity = kCapacity;
  header->slot_size = sizeof(RingSlot);
  header->rank = -1;
  header->pid = static_cast<int64_t>(::getpid());
}

}  // namespace

Ring& Ring::get() {
  static Ring* ring = new Ring();  // never destroyed: collectives may end during exit
  return *ring;
}

Ring::Ring() {
  void* memory =
      ::mmap(nullptr, kRingBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) throw std::bad_alloc();
  memory_ = static_cast<char*>(memory);
  initialize(memory_);
}

RingHeader* Ring::header() const { return reinterpret_cast<RingHeader*>(memory_); }

RingSlot* Ring::slot(uint64_t ticket) const {
  return reinterpret_cast<RingSlot*>(memory_ + sizeof(RingHeader)) + ticket % kCapacity;
}

void Ring::map_to_file(const std::string& path, int rank, int world_size) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!mapped_to_file_) {
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(kRingBytes)) != 0) {
      const int code = errno;
      if (fd >= 0) ::close(fd);
      throw IoError("cannot create the flight recorder's file " + path + " (" +
                    std::string(kFileVariable) + "): " + std::strerror(code) +
                    "; point it at a writable directory, or unset it.");
    }
    void* mapped = ::mmap(nullptr, kRingBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    const int code = errno;
    ::close(fd);
    if (mapped == MAP_FAILED) {
      throw IoError("cannot map the flight recorder's file " + path + ": " + std::strerror(code) +
                    "; point " + kFileVariable + " at a local file system, or unset it.");
    }
    std::memcpy(mapped, memory_, kRingBytes);
    ::munmap(memory_, kRingBytes);
    memory_ = static_cast<char*>(mapped);
    mapped_to_file_ = true;
  }
  header()->rank = rank;
  header()->world_size = world_size;
}

void Ring::set_rank(int rank, int world_size) {
  std::lock_guard<std::mutex> lock(mutex_);
  header()->rank = rank;
  header()->world_size = world_size;
}

int Ring::rank() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return header()->rank;
}

uint64_t Ring::begin(const Entry& entry) {
  std::lock_guard<std::mutex> lock(mutex_);
  const uint64_t ticket = header()->tickets + 1;
  __atomic_store_n(&header()->tickets, ticket, __ATOMIC_RELEASE);
  RingSlot* s = slot(ticket);
  __atomic_store_n(&s->ticket, 0, __ATOMIC_RELEASE);
  s->sequence = entry.sequence;
  s->group = entry.group;
  s->state = static_cast<int32_t>(entry.state);
  s->numel = entry.numel;
  s->bytes = entry.bytes;
  s->start_us = std::llround(entry.start_time * 1e6);
  s->duration_us = 0;
  copy_text(s->operation, entry.operation);
  copy_text(s->dtype, entry.dtype);
  copy_text(s->name, entry.name);
  __atomic_store_n(&s->ticket, ticket, __ATOMIC_RELEASE);
  return ticket;
}

void Ring::finish(uint64_t ticket, State state, double duration) noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  RingSlot* s = slot(ticket);
  if (s->ticket != ticket) return;  // reused by a newer collective
  __atomic_store_n(&s->duration_us, std::llround(duration * 1e6), __ATOMIC_RELAXED);
  __atomic_store_n(&s->state, static_cast<int32_t>(state), __ATOMIC_RELEASE);
}

std::vector<Entry> Ring::entries() const {
  std::lock_guard<std::mutex> lock(mutex_);
  // Read as another process reads the file: one way to order the slots.
  return parse_ring(std::string(memory_, kRingBytes))->entries;
}

std::optional<Record> parse_ring(const std::string& bytes) {
  if (bytes.size() != kRingBytes) return std::nullopt;
  RingHeader header;
  std::memcpy(&header, bytes.data(), sizeof(header));
  if (std::memcmp(header.magic, kMagic, sizeof(kMagic)) != 0 || header.capacity != kCapacity ||
      header.slot_size != static_cast<int32_t>(sizeof(RingSlot))) {
    return std::nullopt;
  }
  Record record;
  record.rank = header.rank;
  record.world_size = header.world_size;
  record.pid = header.pid;
  std::vector<std::pair<uint64_t, Entry>> held;
  for (int i = 0; i < kCapacity; ++i) {
    RingSlot s;
    std::memcpy(&s, bytes.data() + sizeof(RingHeader) + i * sizeof(RingSlot), sizeof(s));
    if (s.ticket == 0 || s.ticket > header.tickets) continue;  // being written, or torn
    held.emplace_back(s.ticket, entry_of(s));
  }
  std::sort(held.begin(), held.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [ticket, entry] : held) record.entries.push_back(std::move(entry));
  return record;
}

}  // namespace ddp::comm::flight_recorder::detail
