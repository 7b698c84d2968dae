# ddp::parallel, the parallel-training layer on ddp::comm: DDP with its comm
# hooks (PowerSGD among them), static graph and Join, ZeRO, DataParallel and
# CapturedStep. The bucketing engine DDP, ZeRO and ddp::hvd share is
# src/parallel/bucketing/. Included by the top-level CMakeLists.txt.
set(parallel ${PROJECT_SOURCE_DIR}/src/parallel)
ddp_add_library(parallel DEPENDS ddp_comm SOURCES
  ${parallel}/bucketing/bucket_assignment.cpp
  ${parallel}/bucketing/gradient_buckets.cpp
  ${parallel}/distributed_data_parallel/distributed_data_parallel.cpp
  ${parallel}/distributed_data_parallel/reducer.cpp
  ${parallel}/distributed_data_parallel/bucket_copies.cpp
  ${parallel}/distributed_data_parallel/static_graph.cpp
  ${parallel}/distributed_data_parallel/mismatch_board.cpp
  ${parallel}/distributed_data_parallel/comm_hooks.cpp
  ${parallel}/distributed_data_parallel/powersgd_hook.cpp
  ${parallel}/zero_redundancy_optimizer/zero_redundancy_optimizer.cpp
  ${parallel}/zero_redundancy_optimizer/gradient_shards.cpp
  ${parallel}/data_parallel/data_parallel.cpp
  ${parallel}/data_parallel/replica_set.cpp
  ${parallel}/data_parallel/replica_workers.cpp
  ${parallel}/join.cpp
  ${parallel}/rank_agreement.cpp
  ${parallel}/wrapped_module.cpp
  ${parallel}/fully_sharded/fully_sharded_data_parallel.cpp
  ${parallel}/fully_sharded/active_forward.cpp
  ${parallel}/fully_sharded/mapped_allocations.cpp
  ${parallel}/fully_sharded/sharded_construction.cpp
  ${parallel}/fully_sharded/sharded_unit.cpp
  ${parallel}/fully_sharded/sharded_unit_gradient.cpp
  ${parallel}/fully_sharded/buffer_pool.cpp
  ${parallel}/fully_sharded/sharded_placeholder.cpp
  ${parallel}/fully_sharded/unit_schedule.cpp
  ${parallel}/fully_sharded/reduction_queue.cpp
  ${parallel}/fully_sharded/forward_order.cpp
  ${parallel}/fully_sharded/unit_plan.cpp
  ${parallel}/fully_sharded/checked_options.cpp
  ${parallel}/fully_sharded/fully_sharded_state.cpp
  ${parallel}/sharded_state.cpp
  ${parallel}/captured_step.cpp)
# CapturedStep uses CUDA's headers where LibTorch has CUDA; compiled without
# the precompiled header, whose macros it would change, and alone (Note
# [Unity builds]: code compiled only with CUDA shares no translation unit).
if(TORCH_CUDA_LIBRARIES OR TARGET torch_cuda)
  set_source_files_properties(${parallel}/captured_step.cpp PROPERTIES
    COMPILE_DEFINITIONS DDP_WITH_CUDA SKIP_PRECOMPILE_HEADERS ON SKIP_UNITY_BUILD_INCLUSION ON)
endif()
