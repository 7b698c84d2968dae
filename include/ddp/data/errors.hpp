#pragma once

/// \file errors.hpp
/// The exceptions of ddp::data (Note [One exception type per failure kind] in
/// ddp/base/errors.hpp). Each kind's exit code is in the one table,
/// Note [Exit codes] there. The names are also ddp's (ddp::DataError).

#include "ddp/base/errors.hpp"

namespace ddp::data {

/// A data file that cannot be read: missing, not in the expected format,
/// truncated, or inconsistent with its companion file. The message names the
/// file and what is wrong with it. Thrown by ddp::data::read_idx() and
/// ddp::data::FashionMnist.
class DataError : public base::ErrorOfKind<DataError, base::ExitCode::kData> {
 public:
  using ErrorOfKind::ErrorOfKind;
};

}  // namespace ddp::data

namespace ddp {
// Also ddp's names, as every kind's was when ddp/base/errors.hpp declared them all.
using data::DataError;
}  // namespace ddp
