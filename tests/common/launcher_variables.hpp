#pragma once

// Launcher variables the test runner itself might have (a CI job under
// torchrun, Open MPI or Slurm, say): a process a test starts must see only
// what its test gives it, so the tests unset these.

#include <string>
#include <vector>

namespace ddp::testing {

inline const std::vector<std::string> kLauncherVariables = {"RANK",
                                                            "WORLD_SIZE",
                                                            "LOCAL_RANK",
                                                            "LOCAL_WORLD_SIZE",
                                                            "GROUP_RANK",
                                                            "MASTER_ADDR",
                                                            "MASTER_PORT",
                                                            "OMPI_COMM_WORLD_RANK",
                                                            "OMPI_COMM_WORLD_SIZE",
                                                            "OMPI_COMM_WORLD_LOCAL_RANK",
                                                            "OMPI_COMM_WORLD_LOCAL_SIZE",
                                                            "SLURM_PROCID",
                                                            "SLURM_NTASKS",
                                                            "SLURM_LOCALID",
                                                            "SLURM_NODEID",
                                                            "SLURM_NTASKS_PER_NODE",
                                                            "SLURM_TASKS_PER_NODE",
                                                            "SLURM_JOB_NODELIST",
                                                            "SLURM_STEP_NODELIST",
                                                            "GLOO_SOCKET_IFNAME"};

}  // namespace ddp::testing
