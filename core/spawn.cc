#include "core/spawn.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

extern char** environ;

namespace rv {

pid_t spawn_process(const std::string& exe, const std::vector<std::string>& argv,
                    const SpawnOptions& options) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (!options.output_file.empty()) {
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, options.output_file.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  } else if (options.output_fd >= 0) {
    posix_spawn_file_actions_adddup2(&actions, options.output_fd, STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&actions, options.output_fd, STDERR_FILENO);
  }
  pid_t pid = 0;
  char* const* env = options.env != nullptr ? options.env : environ;
  const int rc = posix_spawn(&pid, exe.c_str(), &actions, nullptr, args.data(), env);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) throw Error("cannot start " + exe + ": " + std::strerror(rc));
  return pid;
}

int wait_process(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) throw Error("waitpid: " + std::string(std::strerror(errno)));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace rv
