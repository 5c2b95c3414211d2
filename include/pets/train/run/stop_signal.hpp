#pragma once
/// \file
/// The stop request: SIGUSR1 (Slurm's warning before preemption), SIGTERM (what mpirun sends on
/// Ctrl-C, and Slurm on scancel) and SIGINT (Ctrl-C reaching the rank itself: a single process,
/// `srun --disable-status`, `srun --pty`) only record the signal and wake the rank's stop thread
/// (StopCheckpoint, stop_checkpoint.hpp), which writes the checkpoint of the last step completed
/// at once; the ranks agree on the stop through the step's allreduce (before each evaluation
/// batch, and once more after each end-of-epoch checkpoint) and then end.

#include <cstdint>
#include <functional>
#include <string>

namespace pets::comm {
class Communicator;
}

namespace pets::train {

/// Installs the handlers for SIGUSR1, SIGTERM and SIGINT (SA_RESTART). A second SIGUSR1 or
/// SIGTERM changes nothing (the checkpoint goes on); a second SIGINT ends the process at once
/// (the default action). With `announce` (rank 0) the first signal prints one line on stderr
/// saying that the checkpoint of the last step completed is written now (or, after
/// set_final_stretch(), that the run ends once the final model is written).
void install_stop_handlers(bool announce);

/// The last stop signal received, or 0.
int stop_signal();

/// The read end of the pipe the handlers write one byte to for each signal (-1 before
/// install_stop_handlers): what the stop thread waits on.
int stop_signal_fd();
/// Writes `what` to that pipe (to wake the thread reading it).
void wake_stop_reader(char what);
/// From now on the first signal's notice says that the run ends once the final model is written.
void set_final_stretch();

/// The one line rank 0 prints when the ranks stopped and checkpointed at (epoch, step) in
/// `out`: "stopped by signal N at epoch E, step S (SIGNAME); checkpoint written in OUT; continue
/// with --resume: pets_train --resume --out OUT ...". `signal` 0: the signal reached another rank
/// only.
std::string stop_line(int signal, std::int64_t epoch, std::int64_t step, const std::string& out);

/// Forgets a received signal and restores the SIGINT handler (tests).
void reset_stop_signal();

/// The ranks' agreement to stop, once agreed for good: through the collective of each training
/// step (TrainStep::run carries request() in its allreduce; record() takes its answer) and,
/// where no step runs (before each evaluation batch, after an end-of-epoch checkpoint), through
/// one counter summed over `comm` (agree()).
class StopAgreement {
 public:
  /// `requested`: whether this rank asks to stop; by default, whether a stop signal came.
  explicit StopAgreement(comm::Communicator& comm, std::function<bool()> requested = nullptr);

  /// This rank's request, for a collective that carries it to every rank.
  const std::function<bool()>& request() const { return requested_; }
  /// Takes what such a collective agreed; returns agreed().
  bool record(bool any_rank_asked);
  /// Unless already agreed, the ranks agree now (collective over `comm`); returns agreed().
  bool agree();
  /// Whether every rank knows that some rank asked to stop.
  bool agreed() const { return agreed_; }

 private:
  comm::Communicator& comm_;
  std::function<bool()> requested_;
  bool agreed_ = false;
};

/// PETS_PAUSE_EVAL's pause: announces "pausing WHERE" on stderr, then sleeps `seconds` or until
/// a stop signal arrives.
void pause_for_test(const std::string& where, double seconds);

}  // namespace pets::train
