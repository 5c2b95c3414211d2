#pragma once
/// \file
/// The stop request of a preempted job: SIGUSR1 (Slurm's warning before preemption) and SIGTERM
/// (what mpirun forwards) only record the signal; the training loop reads it at step boundaries
/// and the ranks agree on it through the step's allreduce.

namespace pets::train {

/// Installs the handlers for SIGUSR1 and SIGTERM (SA_RESTART). A second signal during the
/// checkpoint changes nothing.
void install_stop_handlers();

/// The last stop signal received, or 0.
int stop_signal();

/// Forgets a received signal (tests).
void reset_stop_signal();

}  // namespace pets::train
