#include "comm/store/worker_protocol.hpp"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <system_error>

#include "base/str.hpp"
#include "ddp/base/errors.hpp"

namespace ddp::comm::store {

std::string generations_key() { return "ddp/generations"; }

std::string finished_key() { return "ddp/finished"; }

std::string generation_prefix(int generation) {
  return base::detail::str("ddp/generation/", generation);
}

std::string reseat_key(int generation, int rank) {
  return base::detail::str(generation_prefix(generation), "/seat/", rank);
}

std::string spare_ready_key(const std::string& id) { return "ddp/spare/" + id + "/ready"; }

std::string spare_seat_key(const std::string& id) { return "ddp/spare/" + id + "/seat"; }

std::string spare_running_key(const std::string& id) { return "ddp/spare/" + id + "/running"; }

std::string encode_seat(const std::map<std::string, std::string>& variables) {
  std::string text;
  for (const auto& [name, value] : variables) text += name + "=" + value + "\n";
  return text;
}

std::map<std::string, std::string> decode_seat(const std::string& text) {
  std::map<std::string, std::string> variables;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    const auto equals = line.find('=');
    if (equals != std::string::npos) variables[line.substr(0, equals)] = line.substr(equals + 1);
  }
  return variables;
}

std::string format_store_file(const StoreFileEntry& entry) {
  return base::detail::str(entry.count, " ", entry.address, "\n");
}

void write_store_file(const std::string& path, const StoreFileEntry& entry) {
  const std::string temp = path + ".new";
  {
    std::ofstream file(temp, std::ios::trunc);
    file << format_store_file(entry);
    if (!file.flush()) {
      throw IoError(base::detail::str("cannot write ", temp,
                                      ", the recovery store's address for the workers; check that "
                                      "TMPDIR is writable and not full."));
    }
  }
  std::error_code error;
  std::filesystem::rename(temp, path, error);
  if (error) {
    throw IoError(base::detail::str("cannot rename ", temp, " to ", path, ": ", error.message(),
                                    "; check that TMPDIR is writable."));
  }
}

StoreFileEntry parse_store_file(const std::string& text, const std::string& path) {
  std::istringstream in(text);
  StoreFileEntry entry;
  std::string rest;
  const bool read = static_cast<bool>(in >> entry.count >> entry.address);
  const auto colon = entry.address.rfind(':');
  if (!read || entry.count < 1 || colon == std::string::npos || colon == 0 ||
      colon + 1 == entry.address.size() || (in >> rest)) {
    throw ConfigError(base::detail::str(
        path, " (", kRecoveryStoreFileVariable, ") holds '", text,
        "', not \"<count> HOST:PORT\" with a count of 1 or more; ddprun --recovery memory "
        "writes it: do not edit it, and give workers the file of their own launcher."));
  }
  return entry;
}

std::optional<StoreFileEntry> read_store_file(const std::string& path) {
  std::ifstream file(path);
  if (!file) return std::nullopt;
  const std::string text{std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
  return parse_store_file(text, path);
}

std::string run_id_key() { return "ddprun/run_id"; }

std::string takeover_key() { return "ddprun/takeover"; }

std::string rendezvous_key(const std::string& run_id, int round, const std::string& name) {
  return "ddprun/" + run_id + "/rdzv/" +
         (round < 0 ? std::string() : base::detail::str(round, "/")) + name;
}

std::string attempt_key(const std::string& run_id, int attempt, const std::string& name) {
  return base::detail::str("ddprun/", run_id, "/", attempt, "/", name);
}

// The first line of a failure's value (failure_value()).
const std::string kRepeatsLine = "repeats\n";
const std::string kRestartLine = "restart\n";

std::string failure_value(const AttemptFailure& failure) {
  return (failure.repeats ? kRepeatsLine : kRestartLine) + failure.text;
}

AttemptFailure parse_failure_value(const std::string& value) {
  if (value.rfind(kRepeatsLine, 0) == 0) return {value.substr(kRepeatsLine.size()), true};
  if (value.rfind(kRestartLine, 0) == 0) return {value.substr(kRestartLine.size()), false};
  return {value, false};
}

std::string recovery_store_key(const std::string& run_id) {
  return "ddprun/" + run_id + "/recovery_store";
}

}  // namespace ddp::comm::store
