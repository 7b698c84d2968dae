#include "ddp/comm/error_file.hpp"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <mutex>

#include "comm/flight_recorder/entry_json.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/comm/environment.hpp"
#include "ddp/comm/flight_recorder.hpp"

namespace ddp::comm {

bool record_error_to(const std::string& path, const std::string& message, int rank,
                     int error_code) noexcept {
  try {
    const double now =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    // torchrun's layout: {"message": {"message": ..., "extraInfo": {...}}}.
    nlohmann::json record = {{"message",
                              {{"message", message},
                               {"errorCode", error_code},
                               {"extraInfo",
                                {{"timestamp", std::to_string(static_cast<int64_t>(now))},
                                 {"rank", rank},
                                 {"time", now}}}}}};
    // The collectives before the failure (Note [What the flight recorder keeps]).
    const std::vector<flight_recorder::Entry> collectives = flight_recorder::entries();
    if (!collectives.empty()) {
      nlohmann::json list = nlohmann::json::array();
      for (const auto& e : collectives) list.push_back(flight_recorder::detail::entry_to_json(e));
      record["message"]["extraInfo"]["flight_recorder"] = std::move(list);
    }
    const std::string temporary = path + ".tmp";
    {
      std::ofstream out(temporary, std::ios::trunc);
      out << record.dump(2) << "\n";
      if (!out) return false;
    }
    return std::rename(temporary.c_str(), path.c_str()) == 0;
  } catch (...) {
    return false;
  }
}

bool record_error(const std::exception& error) noexcept {
  try {
    const EnvironmentMap env = capture_environment();
    auto file = env.find("TORCHELASTIC_ERROR_FILE");
    if (file == env.end() || file->second.empty()) return false;
    int rank = -1;
    if (auto r = env.find("RANK"); r != env.end()) rank = std::atoi(r->second.c_str());
    return record_error_to(file->second, error.what(), rank,
                           static_cast<int>(exit_code_for(error)));
  } catch (...) {
    return false;
  }
}

namespace {

std::terminate_handler previous_handler = nullptr;

[[noreturn]] void record_then_terminate() {
  if (std::exception_ptr uncaught = std::current_exception()) {
    try {
      std::rethrow_exception(uncaught);
    } catch (const std::exception& error) {
      record_error(error);
    } catch (...) {
    }
  }
  if (previous_handler) previous_handler();
  std::abort();
}

}  // namespace

void record_uncaught_errors() noexcept {
  static std::once_flag installed;
  std::call_once(installed, [] { previous_handler = std::set_terminate(record_then_terminate); });
}

std::optional<RecordedError> read_error_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  nlohmann::json record = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (record.is_discarded() || !record.contains("message")) return std::nullopt;
  RecordedError error;
  const auto& message = record["message"];
  if (message.is_string()) {
    error.message = message.get<std::string>();
    return error;
  }
  error.message = message.value("message", "");
  if (message.contains("errorCode") && message["errorCode"].is_number_integer()) {
    error.error_code = message["errorCode"].get<int>();
  }
  if (message.contains("extraInfo")) {
    const auto& extra = message["extraInfo"];
    error.rank = extra.value("rank", -1);
    if (extra.contains("time")) error.timestamp = extra["time"].get<double>();
  }
  return error;
}

}  // namespace ddp::comm
