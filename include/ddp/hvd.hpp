#pragma once

/// \file hvd.hpp
/// The Horovod-style API in one include (namespace ddp::hvd): init, rank,
/// size, local_rank, local_size; DistributedOptimizer with tensor fusion;
/// broadcast_parameters and broadcast_optimizer_state; learning-rate
/// scaling with warm-up. The timeline (HOROVOD_TIMELINE) is
/// ddp/timeline.hpp, and records every collective of ddp, not only these.
///
/// \code
///   #include <ddp/hvd.hpp>
///   namespace hvd = ddp::hvd;
///   hvd::init();
///   hvd::DistributedOptimizer optimizer(torch::optim::Adam(model->parameters(), 1e-3));
///   hvd::broadcast_parameters(*model, 0);
///   hvd::broadcast_optimizer_state(optimizer.optimizer(), 0);
/// \endcode

#include "ddp/hvd/broadcast.hpp"              // IWYU pragma: export
#include "ddp/hvd/distributed_optimizer.hpp"  // IWYU pragma: export
#include "ddp/hvd/learning_rate.hpp"          // IWYU pragma: export
#include "ddp/hvd/runtime.hpp"                // IWYU pragma: export
#include "ddp/timeline/timeline.hpp"          // IWYU pragma: export
