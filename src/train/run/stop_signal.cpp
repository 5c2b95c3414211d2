#include "pets/train/run/stop_signal.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <thread>
#include <utility>

#include "pets/comm/communicator.hpp"

namespace pets::train {
namespace {

volatile std::sig_atomic_t g_stop_signal = 0;
volatile std::sig_atomic_t g_announce = 0;
volatile std::sig_atomic_t g_terminal = 0;
volatile std::sig_atomic_t g_final = 0;  // set_final_stretch(): the last checkpoint is written
int g_pipe[2] = {-1, -1};                // the stop thread reads, the handler writes

const char kNotice[] =
    "pets_train: stop requested: rank 0 writes the checkpoint of the last step completed now "
    "(Ctrl-C again: quit at once)\n";
const char kFinalNotice[] =
    "pets_train: stop requested after the last checkpoint: the run ends once the final model "
    "is written\n";

extern "C" void on_stop_signal(int signal) {
  const bool first = g_stop_signal == 0;
  g_stop_signal = signal;  // later ones change nothing else: the checkpoint goes on
  // Only async-signal-safe calls here: write(2), to a non-blocking pipe and of constant text.
  const int saved_errno = errno;
  if (g_pipe[1] >= 0) (void)!::write(g_pipe[1], "s", 1);
  if (first && g_announce) {
    // On a terminal the progress line is still drawn: start on a line of our own.
    if (g_terminal) (void)!::write(STDERR_FILENO, "\n", 1);
    if (g_final)
      (void)!::write(STDERR_FILENO, kFinalNotice, sizeof kFinalNotice - 1);
    else
      (void)!::write(STDERR_FILENO, kNotice, sizeof kNotice - 1);
  }
  errno = saved_errno;
}

void install(int signal, int flags) {
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART | flags;
  sigaction(signal, &action, nullptr);
}

}  // namespace

void install_stop_handlers(bool announce) {
  if (g_pipe[0] < 0 && ::pipe2(g_pipe, O_CLOEXEC) == 0) {
    (void)::fcntl(g_pipe[1], F_SETFL, O_NONBLOCK);  // the handler never waits
  }
  g_announce = announce ? 1 : 0;
  g_final = 0;
  g_terminal = ::isatty(STDERR_FILENO) ? 1 : 0;
  install(SIGUSR1, 0);
  install(SIGTERM, 0);
  // SA_RESETHAND: after the first SIGINT the default action is back, so a second Ctrl-C ends the
  // process at once (what a user pressing it again asks for).
  install(SIGINT, SA_RESETHAND);
}

int stop_signal() { return g_stop_signal; }

int stop_signal_fd() { return g_pipe[0]; }

void wake_stop_reader(char what) {
  if (g_pipe[1] >= 0) (void)!::write(g_pipe[1], &what, 1);
}

void set_final_stretch() { g_final = 1; }

std::string stop_line(int signal, std::int64_t epoch, std::int64_t step, const std::string& out) {
  const char* name = signal == SIGINT    ? " (SIGINT)"
                     : signal == SIGTERM ? " (SIGTERM)"
                     : signal == SIGUSR1 ? " (SIGUSR1)"
                                         : "";
  const std::string by =
      signal != 0 ? "signal " + std::to_string(signal) : std::string("a signal to another rank");
  return "stopped by " + by + " at epoch " + std::to_string(epoch) + ", step " +
         std::to_string(step) + name + "; checkpoint written in " + out +
         "; continue with --resume: pets_train --resume --out " + out +
         " (the checkpoint records every other option; jobs/train.sbatch and "
         "jobs/interactive.sh add --resume themselves)";
}

void reset_stop_signal() {
  g_stop_signal = 0;
  g_final = 0;
  if (g_pipe[0] >= 0) {  // forget the bytes of earlier signals too
    const int flags = ::fcntl(g_pipe[0], F_GETFL);
    (void)::fcntl(g_pipe[0], F_SETFL, flags | O_NONBLOCK);
    char bytes[64];
    while (::read(g_pipe[0], bytes, sizeof bytes) > 0) {
    }
    (void)::fcntl(g_pipe[0], F_SETFL, flags);
  }
  install(SIGINT, SA_RESETHAND);
}

StopAgreement::StopAgreement(comm::Communicator& comm, std::function<bool()> requested)
    : comm_(comm), requested_(std::move(requested)) {
  if (!requested_) requested_ = [] { return stop_signal() != 0; };
}

bool StopAgreement::record(bool any_rank_asked) {
  agreed_ = agreed_ || any_rank_asked;
  return agreed_;
}

bool StopAgreement::agree() {
  if (!agreed_) agreed_ = comm_.sum_counter(requested_() ? 1 : 0) > 0;
  return agreed_;
}

void pause_for_test(const std::string& where, double seconds) {
  std::fprintf(stderr, "pausing %s (test switch, %.1f s)\n", where.c_str(), seconds);
  std::fflush(stderr);
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (stop_signal() == 0 && std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

}  // namespace pets::train
