#pragma once

// Internal: the keys and values by which ddprun hands a hot spare a lost
// worker's rank (Note [A spare waits for a seat] in ddp/elastic/run.hpp),
// in the recovery store. The launcher writes them and ddp::elastic reads
// them; both sit above comm, so the protocol lives here.
//
//   ddp/spare/<id>/ready    the spare's pid, set once it waits (LibTorch
//                           loaded, the program's set-up done);
//   ddp/spare/<id>/seat     set by the agent: the worker's variables as
//                           VAR=VALUE lines, or "release" at the job's end;
//   ddp/spare/<id>/running  the generation, set by the promoted spare once
//                           it has the group's state (the agent then starts
//                           another spare).
//   ddp/generation/<g>/seat/<rank>  a running worker's new place when the
//                           job re-forms at another size in memory (Note [A
//                           new host] in ddp/launch/node_rendezvous.hpp),
//                           keyed by the rank it had; set before generation
//                           g starts.

#include <map>
#include <sstream>
#include <string>

namespace ddp::comm::store {

/// The value of a spare's seat key that ends it: the job needs no more
/// spares.
inline constexpr const char* kSpareRelease = "release";

/// "ddp/spare/<id>/<what>": `what` is "ready", "seat" or "running".
inline std::string spare_key(const std::string& id, const std::string& what) {
  return "ddp/spare/" + id + "/" + what;
}

/// "ddp/generation/<g>/seat/<rank>": the seat of the worker that had `rank`.
inline std::string reseat_key(int generation, int rank) {
  return "ddp/generation/" + std::to_string(generation) + "/seat/" + std::to_string(rank);
}

/// A seat's variables as the store keeps them, one VAR=VALUE per line.
inline std::string encode_seat(const std::map<std::string, std::string>& variables) {
  std::string text;
  for (const auto& [name, value] : variables) text += name + "=" + value + "\n";
  return text;
}

/// The variables of encode_seat()'s text (lines without '=' are skipped).
inline std::map<std::string, std::string> decode_seat(const std::string& text) {
  std::map<std::string, std::string> variables;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    const auto equals = line.find('=');
    if (equals != std::string::npos) variables[line.substr(0, equals)] = line.substr(equals + 1);
  }
  return variables;
}

}  // namespace ddp::comm::store
