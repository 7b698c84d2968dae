#pragma once

/// \file job_secret.hpp
/// Internal: the job's secret on disk, shared by ddprun and its workers so
/// that the rendezvous store admits only them (Note [Store authentication]).
///
/// ddprun writes a fresh secret for every single-node job into a private
/// directory (mode 0700, the file 0600) and names the file in the workers'
/// DDP_JOB_SECRET_FILE; for several nodes the user gives every node the same
/// file with --secret-file. The secret is the file's content with trailing
/// white space removed. A file that others can read is refused, as ssh
/// refuses such a key: a secret anyone can read protects nothing.

#include <string>

namespace ddp::comm::store {

/// The worker variable that names the secret file.
inline constexpr const char* kJobSecretFileVariable = "DDP_JOB_SECRET_FILE";

/// Reads the secret in `path`. Throws ddp::ConfigError when the file cannot
/// be read, is readable or writable by group or others, or holds fewer than
/// 16 bytes, saying how to fix it.
std::string read_job_secret(const std::string& path);

/// Writes 32 random bytes, hex-encoded, to `directory`/job.secret (created
/// with mode 0600, never over an existing file) and returns the file's path.
/// Throws ddp::IoError when it cannot be written.
std::string write_job_secret(const std::string& directory);

}  // namespace ddp::comm::store
