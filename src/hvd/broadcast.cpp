#include "ddp/hvd/broadcast.hpp"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "base/str.hpp"
#include "comm/byte_exchange.hpp"
#include "comm/collective_name.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/comm/broadcast_tensors.hpp"
#include "ddp/comm/process_group.hpp"
#include "ddp/hvd/runtime.hpp"
#include "ddp/snapshot/errors.hpp"
#include "ddp/snapshot/snapshot_manager.hpp"
#include "parallel/rank_agreement.hpp"
#include "snapshot/optimizer_state.hpp"

namespace ddp::hvd {
namespace {

using nlohmann::json;

// Note [Agreeing before moving data]
// A rank that cannot take part (another optimizer type, other shapes) must
// not leave the others waiting in a broadcast it never joins. Each phase
// therefore ends with a one-element all-reduce of "did anything fail here",
// and every rank throws together: the failing rank with its reason, the
// others pointing at it.
void agree_or_throw(ProcessGroup& group, const std::string& local_failure, const char* who) {
  at::Tensor failed = at::full({1}, local_failure.empty() ? -1 : group.rank(), at::kLong);
  group.all_reduce(failed, ReduceOp::kMax);
  if (!local_failure.empty()) throw InvalidArgumentError(local_failure);
  const int64_t rank = failed.item<int64_t>();
  if (rank >= 0) {
    throw InvalidArgumentError(
        base::detail::str(who, ": rank ", rank,
                          " could not take part (its log has the reason); every rank must pass the "
                          "same kind of optimizer over the same model."));
  }
}

// The parameter that a manifest entry's state tensor belongs to.
const at::Tensor& parameter_of(const torch::optim::Optimizer& optimizer, const json& entry) {
  return optimizer.param_groups()
      .at(entry.at("group").get<size_t>())
      .params()
      .at(entry.at("index").get<size_t>());
}

}  // namespace

void broadcast_parameters(const std::vector<at::Tensor>& tensors, int root,
                          std::shared_ptr<ProcessGroup> group) {
  group = detail::group_or_default(std::move(group), "hvd::broadcast_parameters");
  if (group->size() == 1) return;
  ddp::comm::detail::CollectiveName name("hvd.broadcast_parameters");
  std::vector<std::string> names;
  for (size_t i = 0; i < tensors.size(); ++i) names.push_back(base::detail::str("#", i));
  // A cheap agreement check first (one all-reduce of a fingerprint); only
  // when ranks differ does the full comparison run, to name the difference.
  std::string text;
  for (const auto& d : ddp::parallel::detail::describe_tensors(names, tensors)) text += d + "\n";
  const int64_t fingerprint = static_cast<int64_t>(std::hash<std::string>{}(text) >> 2);
  at::Tensor extremes = at::tensor({fingerprint, -fingerprint}, at::kLong);
  group->all_reduce(extremes, ReduceOp::kMax);
  if (extremes[0].item<int64_t>() != -extremes[1].item<int64_t>()) {
    try {
      // The message keeps the wording it had when this check was DDP's.
      ddp::parallel::detail::verify_same_across_ranks(
          *group, ddp::parallel::detail::describe_tensors(names, tensors),
          "DistributedDataParallel", "tensors",
          "Every rank must build the same model before wrapping it.");
    } catch (const InvalidArgumentError& e) {
      throw InvalidArgumentError(std::string("hvd::broadcast_parameters: ") + e.what());
    }
  }
  torch::NoGradGuard no_grad;
  broadcast_tensors(*group, tensors, root);
}

void broadcast_parameters(torch::nn::Module& module, int root,
                          std::shared_ptr<ProcessGroup> group) {
  std::vector<at::Tensor> state = module.parameters();
  for (const auto& buffer : module.buffers()) state.push_back(buffer);
  broadcast_parameters(state, root, std::move(group));
}

void broadcast_optimizer_state(torch::optim::Optimizer& optimizer, int root,
                               std::shared_ptr<ProcessGroup> group) {
  constexpr const char* kWho = "hvd::broadcast_optimizer_state";
  group = detail::group_or_default(std::move(group), kWho);
  if (root < 0 || root >= group->size()) {
    throw InvalidArgumentError(base::detail::str(
        kWho, ": root rank ", root, " is outside the group (ranks 0 to ", group->size() - 1, ")."));
  }
  ddp::comm::detail::CollectiveName name("hvd.broadcast_optimizer_state");
  const std::string where = base::detail::str(kWho, " on rank ", group->rank());

  // 1. Everyone can describe its optimizer (a supported type).
  ddp::snapshot::detail::TensorMap tensors;
  json description;
  std::string failure;
  try {
    description = ddp::snapshot::detail::export_optimizer(optimizer, tensors);
  } catch (const SnapshotError& e) {
    failure = where + ": " + e.what() + ".";
  }
  if (group->size() == 1) {
    if (!failure.empty()) throw InvalidArgumentError(failure);
    return;
  }
  agree_or_throw(*group, failure, kWho);

  // 2. The root's description, with the name, dtype and shape of every
  // state tensor, in the order they will travel.
  json manifest = json::array();
  if (group->rank() == root) {
    for (const auto& [tensor_name, tensor] : tensors) {
      unsigned g = 0, i = 0;
      std::sscanf(tensor_name.c_str(), "optim/g%u/p%u/", &g, &i);
      manifest.push_back({{"name", tensor_name},
                          {"group", g},
                          {"index", i},
                          {"dtype", static_cast<int>(tensor.scalar_type())},
                          {"sizes", tensor.sizes().vec()}});
    }
  }
  const json shared = json::parse(ddp::comm::detail::broadcast_bytes(
      *group, json{{"optimizer", description}, {"tensors", manifest}}.dump(), root));

  // 3. Everyone checks that the root's state fits its own optimizer.
  std::vector<at::Tensor> travelling;
  ddp::snapshot::detail::TensorMap received;
  failure.clear();
  try {
    for (const auto& entry : shared.at("tensors")) {
      const std::string tensor_name = entry.at("name").get<std::string>();
      at::Tensor tensor;
      if (group->rank() == root) {
        tensor = tensors.at(tensor_name);
      } else {
        const at::Tensor& parameter = parameter_of(optimizer, entry);
        tensor = at::empty(
            entry.at("sizes").get<std::vector<int64_t>>(),
            parameter.options().dtype(static_cast<at::ScalarType>(entry.at("dtype").get<int>())));
      }
      received[tensor_name] = tensor;
      travelling.push_back(tensor);
    }
    ddp::snapshot::detail::check_optimizer(where, shared.at("optimizer"), received, optimizer);
  } catch (const SnapshotError& e) {
    failure = std::string(e.what()) +
              ". Every rank must build the same optimizer over the "
              "same model.";
  } catch (const std::exception& e) {
    failure = base::detail::str(where, ": rank ", root,
                                "'s optimizer state does not fit this rank's optimizer (", e.what(),
                                "). Every rank must build the same optimizer over the same model.");
  }
  agree_or_throw(*group, failure, kWho);

  // 4. The state tensors in one collective, then the import.
  torch::NoGradGuard no_grad;
  broadcast_tensors(*group, travelling, root);
  if (group->rank() != root)
    ddp::snapshot::detail::import_optimizer(shared.at("optimizer"), received, optimizer);
}

}  // namespace ddp::hvd
