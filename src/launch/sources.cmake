# ddp::launch, the launcher layer on ddp::comm: ddprun's agent, the node
# rendezvous, the recovery store, child processes with deadlines and port
# reservations (used by ddprun, the tests, the self-check tool and the
# benchmarks). Included by the top-level CMakeLists.txt.
set(launch ${PROJECT_SOURCE_DIR}/src/launch)
ddp_add_library(launch STATIC DEPENDS ddp_comm SOURCES
  ${launch}/agent.cpp
  ${launch}/allocator_choice.cpp
  ${launch}/agent_workers.cpp
  ${launch}/agent_reseat.cpp
  ${launch}/agent_heartbeats.cpp
  ${launch}/child_process.cpp
  ${launch}/host_succession.cpp
  ${launch}/port_reservation.cpp
  ${launch}/launch_options.cpp
  ${launch}/node_rendezvous.cpp
  ${launch}/rank_output.cpp
  ${launch}/spare_pool.cpp
  ${launch}/recovery_store.cpp
  ${launch}/stall_report.cpp
  ${launch}/stream_choice.cpp
  ${launch}/worker_environment.cpp
  ${launch}/attempt_decision.cpp
  ${launch}/agent_outcome.cpp)
