#include "pets/train/stop_signal.hpp"

#include <unistd.h>

#include <csignal>
#include <cstring>
#include <utility>

#include "pets/comm/communicator.hpp"

namespace pets::train {
namespace {

volatile std::sig_atomic_t g_stop_signal = 0;
volatile std::sig_atomic_t g_announce = 0;
volatile std::sig_atomic_t g_terminal = 0;

const char kNotice[] =
    "pets_train: stop requested: the ranks finish this step and write a checkpoint "
    "(Ctrl-C again: quit at once, without one)\n";

extern "C" void on_stop_signal(int signal) {
  const bool first = g_stop_signal == 0;
  g_stop_signal = signal;  // later ones change nothing else: the checkpoint goes on
  if (first && g_announce) {
    // Only async-signal-safe calls here: write(2) of constant text. On a terminal the progress
    // line is still drawn: start on a line of our own.
    if (g_terminal) (void)!::write(STDERR_FILENO, "\n", 1);
    (void)!::write(STDERR_FILENO, kNotice, sizeof kNotice - 1);
  }
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
  g_announce = announce ? 1 : 0;
  g_terminal = ::isatty(STDERR_FILENO) ? 1 : 0;
  install(SIGUSR1, 0);
  install(SIGTERM, 0);
  // SA_RESETHAND: after the first SIGINT the default action is back, so a second Ctrl-C ends the
  // process at once (what a user pressing it again asks for).
  install(SIGINT, SA_RESETHAND);
}

int stop_signal() { return g_stop_signal; }

std::string stop_line(int signal, std::int64_t epoch, std::int64_t step, const std::string& out) {
  const char* name = signal == SIGINT    ? " (SIGINT)"
                     : signal == SIGTERM ? " (SIGTERM)"
                     : signal == SIGUSR1 ? " (SIGUSR1)"
                                         : "";
  const std::string by =
      signal != 0 ? "signal " + std::to_string(signal) : std::string("a signal to another rank");
  return "stopped by " + by + " at epoch " + std::to_string(epoch) + ", step " +
         std::to_string(step) + name + "; checkpoint written in " + out +
         "; continue with --resume: the same command with --resume added (jobs/train.sbatch "
         "and jobs/interactive.sh add it themselves)";
}

void reset_stop_signal() {
  g_stop_signal = 0;
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

}  // namespace pets::train
