#include "parallel/distributed_data_parallel/mismatch_board.hpp"

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <atomic>
#include <thread>
#include <vector>

#include "base/str.hpp"
#include "ddp/comm/process_group.hpp"
#include "ddp/comm/tcp_store.hpp"
#include "parallel/distributed_data_parallel/reducer.hpp"

namespace ddp::parallel::detail {
namespace {

std::atomic<int64_t> boards_made{0};  // Note [Naming a mismatch on every rank]

}  // namespace

MismatchBoard::MismatchBoard(ProcessGroup& group)
    : rank_(group.rank()), world_(group.size()), timeout_(group.collective_timeout()) {
  prefix_ = base::detail::str("ddp/mismatch/", boards_made++, "/");
  auto* tcp = dynamic_cast<TcpStore*>(group.rendezvous_store().get());
  if (tcp == nullptr || world_ == 1) return;
  try {
    store_ = tcp->clone();  // a connection of its own
  } catch (const std::exception&) {
    store_.reset();  // no board: failures keep their own messages
  }
}

MismatchBoard::~MismatchBoard() = default;

std::string MismatchBoard::key(const char* kind, int rank) const {
  return base::detail::str(prefix_, kind, "/", rank);
}

bool MismatchBoard::has(const std::string& key) { return store_->check({key}); }

std::string MismatchBoard::read(const std::string& key) {
  const std::vector<uint8_t> value = store_->get(key);
  return std::string(value.begin(), value.end());
}

void MismatchBoard::post(const std::string& key, const std::string& value) {
  store_->set(key, std::vector<uint8_t>(value.begin(), value.end()));
}

void MismatchBoard::report_error(const std::string& message) {
  if (!store_ || reported_) return;
  reported_ = true;
  try {
    post(key("error", rank_), message);
    if (rank_ != 0) return;
    // This process hosts the store: keep it up until the others have seen.
    // A peer's collective times out `timeout_` after that peer started it,
    // which on a loaded machine may be later than now: twice the timeout
    // covers a peer up to one timeout behind.
    const auto deadline = std::chrono::steady_clock::now() + 2 * timeout_;
    while (std::chrono::steady_clock::now() < deadline) {
      bool everyone = true;
      for (int r = 1; r < world_ && everyone; ++r) {
        everyone = has(key("read", r)) || has(key("error", r)) || has(key("left", r));
      }
      if (everyone) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  } catch (const std::exception&) {
    // The store is gone: nothing more to tell anyone.
  }
}

void MismatchBoard::note_skipped_backward(int64_t iteration) {
  if (!store_ || skipped_noted_) return;
  skipped_noted_ = true;
  try {
    post(key("skipped", rank_), std::to_string(iteration));
  } catch (const std::exception&) {
  }
}

void MismatchBoard::note_left(int64_t iterations, int64_t synchronized) noexcept {
  if (!store_ || reported_) return;
  try {
    post(key("left", rank_), base::detail::str(iterations, " training forwards, ", synchronized,
                                               " of them synchronized"));
  } catch (...) {
  }
}

void MismatchBoard::explain(const Error& failure, const std::string& what, int64_t iteration) {
  if (!store_) throw;  // the handler's exception, unchanged
  std::string message =
      base::detail::str("DistributedDataParallel: rank ", rank_, ", iteration ", iteration, ": ",
                        what, " did not complete (", failure.what(), ").");
  std::string reports;
  bool unreachable = false;
  try {
    for (int r = 0; r < world_; ++r) {
      if (r == rank_) continue;
      const std::string who = base::detail::str("rank ", r);
      if (has(key("error", r))) reports += "\n  " + who + " failed: " + read(key("error", r));
      if (has(key("skipped", r))) {
        reports += "\n  " + who + " skipped the backward of its iteration " +
                   read(key("skipped", r)) +
                   " (every rank must run backward after each training forward, or none)";
      }
      if (has(key("left", r))) {
        reports += "\n  " + who + " has left, after " + read(key("left", r)) +
                   ": the ranks ran different numbers of iterations (for uneven inputs, "
                   "train inside a ddp::Join; ddp/parallel/join.hpp)";
      }
    }
    post(key("read", rank_), "1");
  } catch (const std::exception&) {
    unreachable = true;
  }
  if (!reports.empty()) {
    throw InvalidArgumentError(message + " The ranks disagree:" + reports);
  }
  message += unreachable
                 ? " The other ranks' reports cannot be read: the rendezvous store is gone, so "
                   "rank 0, which hosts it, has exited (if it ran fewer iterations than this "
                   "rank, use ddp::Join for uneven inputs)."
                 : " No other rank reported a mismatch: one may be stuck elsewhere or have "
                   "crashed.";
  if (dynamic_cast<const TimeoutError*>(&failure) != nullptr) throw TimeoutError(message);
  throw CollectiveError(message);
}

// The reducer's side of Note [Naming a mismatch on every rank]: what its
// DDP verifies to be the same on every rank at construction, and the
// failure it explains with the board.
std::vector<std::string> Reducer::describe_layout() const {
  // The sizes keep std::to_string's six decimals: every rank compares this
  // text, and the message names both values (tests/multiprocess).
  std::vector<std::string> lines = {base::detail::str(
      "bucket_cap_mb=", std::to_string(options_.bucket_cap_mb()),
      " first_bucket_cap_mb=", std::to_string(options_.first_bucket_cap_mb()),
      " find_unused_parameters=", options_.find_unused_parameters(), " static_graph=",
      options_.static_graph(), " broadcast_buffers=", options_.broadcast_buffers())};
  for (size_t b = 0; b < buckets_.buckets().size(); ++b) {
    const Bucket& bucket = buckets_.buckets()[b];
    std::string line = base::detail::str("bucket ", b, ": ", bucket.flat.numel(), " elements of");
    for (size_t index : bucket.members) line += " '" + names_[index] + "'";
    lines.push_back(std::move(line));
  }
  return lines;
}

void Reducer::explain_failure(const Error& failure, const std::string& what) {
  board_.explain(failure, what, forwards_);
}

}  // namespace ddp::parallel::detail
