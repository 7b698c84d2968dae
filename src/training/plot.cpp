#include "ddp/training/plot.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "base/str.hpp"
#include "ddp/comm/environment.hpp"
#include "ddp/training/errors.hpp"
#include "ddp/training/metrics_csv.hpp"

extern char** environ;

namespace ddp::training {
namespace {

namespace fs = std::filesystem;

bool executable(const fs::path& path) {
  std::error_code error;
  return fs::is_regular_file(path, error) && access(path.c_str(), X_OK) == 0;
}

// The program's path, or "" when it is nowhere to be found.
std::string locate(const std::string& program) {
  if (program.find('/') != std::string::npos) return executable(program) ? program : "";
  const EnvironmentMap env = capture_environment();
  const std::string path = env.count("PATH") ? env.at("PATH") : "/usr/bin:/bin";
  std::stringstream directories(path);
  for (std::string directory; std::getline(directories, directory, ':');) {
    const fs::path candidate = fs::path(directory.empty() ? "." : directory) / program;
    if (executable(candidate)) return candidate.string();
  }
  return "";
}

// A gnuplot string literal: single quotes, in which only '' is special.
std::string quoted(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

std::string script(const std::string& csv, const std::string& png, const PlotOptions& options,
                   bool with_accuracy, size_t rows) {
  std::ostringstream s;
  s << "set terminal pngcairo size " << options.width() << "," << options.height()
    << " font ',11'\n"
    << "set output " << quoted(png) << "\n"
    << "set datafile separator ','\n"
    << "set title " << quoted(options.title()) << " noenhanced\n"
    << "set xlabel 'epoch'\nset ylabel 'training loss'\nset ytics nomirror\nset grid\n"
    << "set key outside top center horizontal\n";
  if (rows <= 20) s << "set xtics 1\n";
  if (rows == 1) s << "set xrange [0.5:1.5]\n";  // One point: avoid an empty range.
  if (with_accuracy) s << "set y2label 'test accuracy'\nset y2tics\n";
  s << "plot " << quoted(csv)
    << " skip 1 using 1:2 with linespoints lw 2 pt 7 title 'training loss' axes x1y1";
  if (with_accuracy) {
    s << ", \\\n     " << quoted(csv)
      << " skip 1 using 1:3 with linespoints lw 2 pt 5 title 'test accuracy' axes x1y2";
  }
  s << "\n";
  return s.str();
}

std::string read_tail(const std::string& path, size_t limit) {
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  if (text.size() > limit) text = "..." + text.substr(text.size() - limit);
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

// Runs `program script` with its output in `log`; returns its wait status.
int run(const std::string& program, const std::string& script_path, const std::string& log) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  std::vector<char*> argv = {const_cast<char*>(program.c_str()),
                             const_cast<char*>(script_path.c_str()), nullptr};
  pid_t pid = -1;
  const int error = posix_spawn(&pid, program.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (error != 0) {
    throw PlotError("cannot start '" + program + "': " + std::strerror(error) + ".");
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

}  // namespace

void require_gnuplot(const PlotOptions& options) {
  if (locate(options.gnuplot()).empty()) {
    throw PlotError("cannot draw curves: the program '" + options.gnuplot() +
                    "' was not found (searched PATH). Install gnuplot (Debian: sudo apt-get "
                    "install gnuplot-nox, or bash scripts/install-deps.sh), or leave out the "
                    "plot; the metrics CSV works without it.");
  }
}

void plot_loss_accuracy(const std::string& csv, const std::string& png,
                        const PlotOptions& options) {
  if (options.width() < 1 || options.height() < 1) {
    throw ConfigError(base::detail::str("plot_loss_accuracy: the image size is ", options.width(),
                                        "x", options.height(), "; both must be positive pixels."));
  }
  const std::vector<EpochMetrics> rows = read_metrics_csv(csv);
  if (rows.empty()) {
    throw PlotError("'" + csv + "' has no epochs yet; nothing to plot into '" + png + "'.");
  }
  require_gnuplot(options);
  const std::string gnuplot = locate(options.gnuplot());
  bool with_accuracy = false;
  for (const auto& row : rows) with_accuracy = with_accuracy || row.accuracy.has_value();
  const fs::path parent = fs::path(png).parent_path();
  std::error_code error;
  if (!parent.empty()) fs::create_directories(parent, error);

  std::string base = (fs::temp_directory_path() / "ddp-plot-XXXXXX").string();
  const int fd = mkstemp(base.data());
  if (fd < 0)
    throw PlotError(std::string("cannot create a temporary file: ") + std::strerror(errno));
  const std::string text = script(csv, png, options, with_accuracy, rows.size());
  const bool written = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  close(fd);
  const std::string log = base + ".log";
  const int status = written ? run(gnuplot, base, log) : -1;
  const std::string output = read_tail(log, 2000);
  fs::remove(base, error);
  fs::remove(log, error);
  if (!written) throw PlotError("cannot write the gnuplot script to the temporary directory.");
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    throw PlotError(base::detail::str("gnuplot ('", gnuplot, "') failed to draw '", png, "' from '",
                                      csv, "' (", WIFEXITED(status) ? "exit " : "signal ",
                                      WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status),
                                      "): ", output));
  }
  if (!fs::exists(png, error) || fs::file_size(png, error) == 0) {
    throw PlotError("gnuplot ran but wrote no image to '" + png + "'; its output: " + output +
                    ". Check that the directory is writable and that gnuplot has the pngcairo "
                    "terminal (Debian's gnuplot-nox has it).");
  }
}

}  // namespace ddp::training
