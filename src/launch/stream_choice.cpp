#include "launch/stream_choice.hpp"

#include "ddp/base/errors.hpp"
#include "launch/to_int.hpp"

namespace ddp::launch {

StreamChoice StreamChoice::parse(const std::string& text, const std::string& option) {
  auto invalid = [&] {
    return ConfigError(option + " is '" + text +
                       "'; torchrun's values are 0 (none), 1 (stdout), 2 (stderr) or 3 (both), "
                       "for every local rank or as LOCAL_RANK:VALUE pairs such as 0:1,1:2.");
  };
  auto streams = [&](const std::string& value) {
    const std::optional<int> number = to_int(value);
    if (!number || *number < 0 || *number > 3) throw invalid();
    return *number;
  };
  StreamChoice choice;
  if (text.find(':') == std::string::npos) {
    choice.all_ = streams(text);
    return choice;
  }
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    const std::string pair = text.substr(start, end - start);
    start = end + 1;
    const size_t colon = pair.find(':');
    const std::optional<int> rank =
        colon == std::string::npos ? std::nullopt : to_int(pair.substr(0, colon));
    if (!rank || *rank < 0) throw invalid();
    choice.by_rank_[*rank] = streams(pair.substr(colon + 1));
  }
  return choice;
}

bool StreamChoice::has(int local_rank, int stdout_or_stderr) const {
  auto found = by_rank_.find(local_rank);
  const int bits = found == by_rank_.end() ? all_ : found->second;
  return (bits >> stdout_or_stderr & 1) != 0;
}

}  // namespace ddp::launch
