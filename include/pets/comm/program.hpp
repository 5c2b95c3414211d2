#pragma once
/// \file
/// The one place programs catch errors. A program's main is
///
///     int main(int argc, char** argv) { return pets::run_mpi_program(argc, argv, body); }
///
/// and everything below it throws. The rules:
///  - pets::UsageError (bad input): printed once, as "error: <message>", by the lowest rank that
///    has it (rank 0 when every rank saw the same bad input); every rank calls MPI_Finalize and
///    the program returns 2. No MPI_Abort, so Open MPI prints no abnormal-termination report.
///  - any other exception (a fault): "error: <message>" on stderr from the rank that has it (the
///    message names the rank), then MPI_Abort(MPI_COMM_WORLD, 1), so no rank is left waiting.
///  - Usage errors must be collective: either every rank throws them from the same deterministic
///    input (argv), or the check runs inside agree_on_usage(), which turns "some ranks failed" into
///    "every rank throws the lowest failing rank's error". A usage error that one rank throws
///    while others carry on into a collective is a bug; it is caught by a timeout
///    (RunSettings::usage_agreement_timeout): the rank with the error prints it and aborts the job.
///  - A normal return: all ranks agree on the largest return value and return it.
///
/// In the comm area because it starts and ends MPI (comm::MpiEnvironment); the exit statuses and
/// the option-parsing helpers programs share without MPI are in pets/util/app.hpp. The names stay
/// in namespace pets, as pets::Error does: they are the whole project's error idiom.

#include <mpi.h>

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "pets/util/app.hpp"
#include "pets/util/error.hpp"

namespace pets {

/// Tuning of run_mpi_program.
struct RunSettings {
  /// How long a rank holding a usage error waits for the other ranks to finish too before it
  /// decides they are stuck elsewhere and aborts the job.
  std::chrono::milliseconds usage_agreement_timeout{10'000};
};

/// Initialises MPI (MPI_Init_thread, at least MPI_THREAD_FUNNELED, MPI_ERRORS_RETURN on the
/// world so that MPI failures become exceptions), runs `body` on every rank, and ends the job by
/// the rules in this file's comment. A one-rank world inside a Slurm step of several tasks
/// (slurm_single_rank_problem) is a usage error before `body` runs. Returns the process exit status
/// (or does not return, when it aborts). If MPI is already initialised, it is neither initialised
/// nor finalised here.
int run_mpi_program(int argc, char** argv, const std::function<int(int, char**)>& body,
                    const RunSettings& settings = {});

/// Collective over MPI_COMM_WORLD: every rank passes the usage error it met (or nullopt). If any
/// rank met one, every rank throws UsageError carrying the message of the lowest such rank.
void agree_on_usage_error(const std::optional<std::string>& local_error);

/// Runs `check` on every rank; a UsageError it throws on some ranks is thrown on all of them
/// (agree_on_usage_error). Other exceptions pass through untouched (they are faults). Returns
/// what `check` returns. Collective over MPI_COMM_WORLD.
template <typename Check>
auto agree_on_usage(Check&& check) -> decltype(check()) {
  using Result = decltype(check());
  std::optional<std::string> error;
  if constexpr (std::is_void_v<Result>) {
    try {
      check();
    } catch (const UsageError& e) {
      error = e.what();
    }
    agree_on_usage_error(error);
  } else {
    std::optional<Result> result;
    try {
      result.emplace(check());
    } catch (const UsageError& e) {
      error = e.what();
    }
    agree_on_usage_error(error);
    return std::move(*result);
  }
}

/// Runs `task` on rank 0 of `comm` alone and gives every rank what it returned, or throws on
/// every rank the UsageError it threw: for input that only rank 0 judges (a folder it locks, a
/// folder it lists), so the error is not "on 1 of N ranks". Other exceptions are faults of
/// rank 0. Collective over `comm`.
std::string decide_on_rank_0(const std::function<std::string()>& task,
                             MPI_Comm comm = MPI_COMM_WORLD);

}  // namespace pets
