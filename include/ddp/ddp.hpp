#pragma once

/// \file ddp.hpp
/// Everything of ddp's public API that ddp::ddp links, in one include.
///
/// Note [One namespace per layer]
/// The base layer is namespace ddp::base, the communication layer ddp::comm
/// and the parallel-training layer ddp::parallel, as their folders and
/// libraries are, so that a name says where it lives. Users write ddp::init,
/// ddp::ConfigError, ddp::ProcessGroup, ddp::DistributedDataParallel: every
/// public header of the three layers ends
/// with `namespace ddp { using namespace <layer>; }`, which makes the layer's
/// names ddp's for qualified lookup, with no list of aliases to keep. (A
/// forward declaration must therefore name the layer: `namespace ddp::comm
/// { class ProcessGroup; }`.) The parts keep namespaces of their own
/// (ddp::hvd, ddp::snapshot, ...), and so does the launcher (ddp::launch,
/// ddp/launch.hpp, library ddp::launch), which ddp::ddp does not link.

#include "ddp/base.hpp"      // IWYU pragma: export
#include "ddp/comm.hpp"      // IWYU pragma: export
#include "ddp/parallel.hpp"  // IWYU pragma: export
// The parts, each a folder of include/ddp/ with a namespace of its own.
#include "ddp/amp.hpp"       // IWYU pragma: export
#include "ddp/formats.hpp"   // IWYU pragma: export
#include "ddp/hvd.hpp"       // IWYU pragma: export
#include "ddp/nn.hpp"        // IWYU pragma: export
#include "ddp/optim.hpp"     // IWYU pragma: export
#include "ddp/snapshot.hpp"  // IWYU pragma: export
#include "ddp/timeline.hpp"  // IWYU pragma: export
