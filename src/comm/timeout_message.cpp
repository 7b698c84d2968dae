#include "comm/timeout_message.hpp"

#include "base/str.hpp"

namespace ddp::comm::detail {

std::string timeout_message(const std::string& what, std::chrono::milliseconds timeout,
                            const std::string& missing, const std::string& unknown_why) {
  std::string text = base::detail::str(what, " did not finish within ", timeout.count(), " ms");
  if (!missing.empty()) {
    text += ": rank(s) " + missing + " did not reach it";
  } else {
    const std::string why = unknown_why.substr(0, unknown_why.find('\n'));
    text += " (" +
            (why.empty() ? std::string("the backend does not say which ranks were missing") : why) +
            ")";
  }
  return base::detail::str(
      text,
      ". Another rank may have crashed, stopped, or issued different collectives: check "
      "every rank's log (all ranks must issue the same collectives in the same order), or "
      "raise the collective timeout (InitOptions::collective_timeout, now ",
      timeout.count(), " ms).");
}

}  // namespace ddp::comm::detail
