// Precompiled header: the LibTorch headers that every translation unit of
// ddp, its tests and tools would otherwise parse again (about 40 s each on
// two cores).
#pragma once
#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
