// The timeline recorder: one file per rank, one pwrite() per event (see
// Note [The file is valid JSON at every moment] in ddp/timeline.hpp).

#include "ddp/timeline/timeline.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "base/dtype_name.hpp"
#include "base/str.hpp"
#include "comm/collective_name.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/comm/environment.hpp"
#include "ddp/comm/process_group.hpp"
#include "timeline/timeline_observer.hpp"

namespace ddp {
namespace timeline {

TimelineOptions::TimelineOptions(std::string path) : path_(std::move(path)) {
  if (path_.empty()) {
    throw ConfigError(
        "timeline: the path is empty; give a file such as "
        "\"/tmp/timeline-%r.json\" (%r becomes the rank) or a prefix.");
  }
}

namespace detail {

using nlohmann::json;

// A recorded collective that has started and not yet been written: it
// holds its lane until its end (Note [The timeline as an observer]).
class PendingEvent final : public ObservedCollective {
 public:
  PendingEvent(uint64_t session, std::string name, int lane)
      : session_(session), name_(std::move(name)), lane_(lane) {}

  void on_finished(const CollectiveFacts& facts,
                   const CollectiveOutcome& outcome) noexcept override;

 private:
  json to_json(const CollectiveFacts& facts, bool waited, double duration_us, int pid) const;

  uint64_t session_;
  std::string name_;
  int lane_;
};

namespace {

// Note [The recorder outlives everything]
// Works (and with them pending events) may be destroyed during static
// destruction, so the recorder is created once and never destroyed.
class Recorder {
 public:
  static Recorder& get() {
    static Recorder* recorder = new Recorder();
    return *recorder;
  }

  bool active() const noexcept { return active_.load(std::memory_order_acquire); }

  void start(const std::string& path, int rank) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (active()) {
      if (path == path_) return;
      throw ConfigError("timeline: already recording into '" + path_ +
                        "', cannot also record "
                        "into '" +
                        path +
                        "'; call ddp::timeline::stop() first (or unset "
                        "DDP_TIMELINE when starting the timeline from code).");
    }
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
      throw IoError("timeline: cannot create '" + path + "': " + std::strerror(errno) +
                    ". Check that its directory exists and is writable.");
    }
    fd_ = fd;
    path_ = path;
    rank_ = rank;
    end_ = 0;
    events_ = 0;
    wrote_any_ = false;
    lanes_busy_.clear();
    lanes_named_ = 0;
    ++session_;
    write_raw("[\n]\n", 0);
    end_ = 1;  // The next entry replaces "\n]\n" from offset 1.
    write_entry({{"name", "process_name"},
                 {"ph", "M"},
                 {"pid", rank},
                 {"args", {{"name", base::detail::str("rank ", rank)}}}});
    write_entry({{"name", "process_sort_index"},
                 {"ph", "M"},
                 {"pid", rank},
                 {"args", {{"sort_index", rank}}}});
    active_.store(true, std::memory_order_release);
  }

  void stop() {
    std::lock_guard<std::mutex> lock(mutex_);
    close_locked();
  }

  std::string path() {
    std::lock_guard<std::mutex> lock(mutex_);
    return active() ? path_ : std::string();
  }

  int64_t events() {
    std::lock_guard<std::mutex> lock(mutex_);
    return events_;
  }

  std::unique_ptr<PendingEvent> begin(const CollectiveFacts& facts) {
    std::string name = ddp::comm::detail::current_collective_name().value_or(operation_name(facts));
    std::lock_guard<std::mutex> lock(mutex_);
    if (!active()) return nullptr;
    int lane = 0;
    while (lane < static_cast<int>(lanes_busy_.size()) && lanes_busy_[lane]) ++lane;
    if (lane == static_cast<int>(lanes_busy_.size())) lanes_busy_.push_back(false);
    lanes_busy_[lane] = true;
    return std::make_unique<PendingEvent>(session_, std::move(name), lane);
  }

  // Writes a finished event (when its session is still recording) and frees
  // its lane.
  void end(uint64_t session, int lane, const std::function<json(int pid)>& event) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!active() || session != session_) return;
    lanes_busy_[lane] = false;
    while (lanes_named_ <= lane) {
      const int named = lanes_named_++;
      write_entry(
          {{"name", "thread_name"},
           {"ph", "M"},
           {"pid", rank_},
           {"tid", named},
           {"args",
            {{"name", named == 0 ? std::string("collectives")
                                 : base::detail::str("collectives (overlapping ", named, ")")}}}});
    }
    write_entry(event(rank_));
    ++events_;
  }

  void release(uint64_t session, int lane) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (active() && session == session_) lanes_busy_[lane] = false;
  }

 private:
  static std::string operation_name(const CollectiveFacts& facts) {
    std::string name = facts.name;
    if (facts.reduce_op) name += std::string("(") + to_string(*facts.reduce_op) + ")";
    return name;
  }

  void write_entry(const json& entry) {
    const std::string text = (wrote_any_ ? ",\n" : "\n") + entry.dump() + "\n]\n";
    if (!write_raw(text, end_)) return;
    end_ += static_cast<off_t>(text.size() - 3);  // Before the new "\n]\n".
    wrote_any_ = true;
  }

  // One pwrite per entry; a failure (disk full) stops the timeline with a
  // warning rather than failing the collective that is being recorded.
  bool write_raw(const std::string& text, off_t offset) {
    size_t written = 0;
    while (written < text.size()) {
      ssize_t n = ::pwrite(fd_, text.data() + written, text.size() - written,
                           offset + static_cast<off_t>(written));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        std::cerr << "ddp timeline: writing '" << path_ << "' failed (" << std::strerror(errno)
                  << "); the timeline stops here.\n";
        close_locked();
        return false;
      }
      written += static_cast<size_t>(n);
    }
    return true;
  }

  void close_locked() {
    active_.store(false, std::memory_order_release);
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  std::mutex mutex_;
  std::atomic<bool> active_{false};
  int fd_ = -1;
  std::string path_;
  int rank_ = 0;
  off_t end_ = 0;
  bool wrote_any_ = false;
  int64_t events_ = 0;
  std::vector<bool> lanes_busy_;
  int lanes_named_ = 0;
  uint64_t session_ = 0;
};

}  // namespace

json PendingEvent::to_json(const CollectiveFacts& facts, bool waited, double duration_us,
                           int pid) const {
  json args = {{"op", facts.name}, {"waited", waited}};
  if (facts.reduce_op) args["reduce"] = to_string(*facts.reduce_op);
  if (facts.root >= 0) args["root"] = facts.root;
  if (facts.dtype) {
    args["dtype"] = ddp::base::detail::dtype_name(*facts.dtype);
    args["numel"] = facts.numel;
    args["bytes"] = facts.bytes;
  }
  const int64_t start_us =
      std::chrono::duration_cast<std::chrono::microseconds>(facts.start_time.time_since_epoch())
          .count();
  return {{"name", name_},      {"cat", "collective"}, {"ph", "X"},    {"ts", start_us},
          {"dur", duration_us}, {"pid", pid},          {"tid", lane_}, {"args", std::move(args)}};
}

void PendingEvent::on_finished(const CollectiveFacts& facts,
                               const CollectiveOutcome& outcome) noexcept {
  if (!outcome.issued) {  // the backend refused it: nothing ran, nothing to show
    Recorder::get().release(session_, lane_);
    return;
  }
  // A wait that threw is shown as not waited on, as no wait saw it complete.
  const bool waited = outcome.waited && !outcome.error;
  const double duration_us = std::chrono::duration<double, std::micro>(outcome.duration).count();
  try {
    Recorder::get().end(session_, lane_,
                        [&](int pid) { return to_json(facts, waited, duration_us, pid); });
  } catch (const std::exception& e) {
    std::cerr << "ddp timeline: an event could not be written: " << e.what() << "\n";
  }
}

std::unique_ptr<ObservedCollective> begin_event(const CollectiveFacts& facts) {
  return Recorder::get().begin(facts);
}

void start_from_environment_once(const EnvironmentMap& env, int rank) {
  static std::once_flag once;
  std::call_once(once, [&env, rank] {
    auto found = env.find(kEnvironmentVariable);
    if (found == env.end() || found->second.empty() || recording()) return;
    Recorder::get().start(path_for_rank(TimelineOptions(found->second).path(), rank), rank);
  });
}

}  // namespace detail

void start(const ProcessGroup& group, const TimelineOptions& options) {
  detail::Recorder::get().start(path_for_rank(options.path(), group.rank()), group.rank());
}

NameScope::NameScope(std::string name) : name_(std::move(name)) {
  ddp::comm::detail::push_collective_name(&name_);
}

NameScope::~NameScope() { ddp::comm::detail::pop_collective_name(); }

void stop() { detail::Recorder::get().stop(); }

bool recording() noexcept { return detail::Recorder::get().active(); }

std::string current_path() { return detail::Recorder::get().path(); }

int64_t events_written() { return detail::Recorder::get().events(); }

std::string path_for_rank(const std::string& path, int rank) {
  const std::string rank_text = std::to_string(rank);
  const size_t marker = path.find("%r");
  if (marker == std::string::npos) return path + rank_text + ".json";
  std::string expanded = path;
  for (size_t at = marker; at != std::string::npos;
       at = expanded.find("%r", at + rank_text.size())) {
    expanded.replace(at, 2, rank_text);
  }
  return expanded;
}

void merge(const std::vector<std::string>& inputs, const std::string& output) {
  nlohmann::json all = nlohmann::json::array();
  for (const auto& input : inputs) {
    std::ifstream in(input);
    if (!in) {
      throw InvalidArgumentError("timeline::merge: cannot read '" + input + "': " +
                                 std::strerror(errno) + "; pass the files the ranks wrote.");
    }
    std::stringstream text;
    text << in.rdbuf();
    nlohmann::json events = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
    if (!events.is_array()) {
      throw InvalidArgumentError("timeline::merge: '" + input +
                                 "' is not a JSON array of "
                                 "trace events; pass the files ddp's timeline wrote.");
    }
    for (auto& event : events) all.push_back(std::move(event));
  }
  std::ofstream out(output, std::ios::trunc);
  out << "[\n";
  for (size_t i = 0; i < all.size(); ++i) out << (i ? ",\n" : "") << all[i].dump();
  out << "\n]\n";
  out.flush();
  if (!out) {
    throw IoError("timeline::merge: cannot write '" + output + "': " + std::strerror(errno) +
                  "; check that its directory exists and is writable.");
  }
}

}  // namespace timeline
}  // namespace ddp
