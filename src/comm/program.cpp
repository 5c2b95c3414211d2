#include "pets/comm/program.hpp"

#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <thread>

#include "pets/comm/mpi_comm.hpp"

namespace pets {

namespace {

void print_error_line(const std::string& message) {
  std::fprintf(stderr, "error: %s\n", message.c_str());
  std::fflush(stderr);
}

/// A fault: say what happened on this rank, then take the whole job down.
[[noreturn]] void abort_job(const std::string& message, int status) {
  print_error_line(message);
  MPI_Abort(MPI_COMM_WORLD, status);
  std::_Exit(status);  // MPI_Abort does not return; this is for a broken MPI only.
}

std::string with_rank(const std::string& message, int rank) {
  return message + " (rank " + std::to_string(rank) + ")";
}

}  // namespace

void agree_on_usage_error(const std::optional<std::string>& local_error) {
  int rank = 0;
  int size = 1;
  PETS_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  PETS_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
  const int mine = local_error ? rank : size;
  int first = size;
  PETS_MPI_CHECK(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
  if (first == size) return;
  const int failed_here = local_error ? 1 : 0;
  int failed = 0;
  PETS_MPI_CHECK(MPI_Allreduce(&failed_here, &failed, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));

  std::string message = rank == first ? *local_error : std::string();
  int length = static_cast<int>(message.size());
  PETS_MPI_CHECK(MPI_Bcast(&length, 1, MPI_INT, first, MPI_COMM_WORLD));
  message.resize(static_cast<std::size_t>(length));
  PETS_MPI_CHECK(MPI_Bcast(message.data(), length, MPI_CHAR, first, MPI_COMM_WORLD));
  if (failed < size) {
    // Input that only some ranks reject (a file missing on one node) is worth pointing at.
    message += " (on " + std::to_string(failed) + " of " + std::to_string(size) +
               " ranks, first rank " + std::to_string(first) + ")";
  }
  throw UsageError(message);
}

std::string decide_on_rank_0(const std::function<std::string()>& task, MPI_Comm communicator) {
  int rank = 0;
  PETS_MPI_CHECK(MPI_Comm_rank(communicator, &rank));
  std::string result, error;
  if (rank == 0) {
    try {
      result = task();
    } catch (const UsageError& e) {
      error = e.what();
    }
  }
  error = comm::broadcast_string(error, communicator);
  if (!error.empty()) throw UsageError(error);
  return comm::broadcast_string(result, communicator);
}

int run_mpi_program(int argc, char** argv, const std::function<int(int, char**)>& body,
                    const RunSettings& settings) {
  std::optional<comm::MpiEnvironment> environment;
  try {
    environment.emplace(argc, argv);
  } catch (const std::exception& e) {
    print_error_line(e.what());
    return kExitFault;
  }
  int rank = 0;
  int size = 1;
  MPI_Comm closing = MPI_COMM_NULL;
  if (MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN) != MPI_SUCCESS ||
      MPI_Comm_rank(MPI_COMM_WORLD, &rank) != MPI_SUCCESS ||
      MPI_Comm_size(MPI_COMM_WORLD, &size) != MPI_SUCCESS ||
      // Private, so the closing agreement can never match a collective of the body.
      MPI_Comm_dup(MPI_COMM_WORLD, &closing) != MPI_SUCCESS) {
    abort_job("MPI start-up failed", kExitFault);
  }

  int status = kExitSuccess;
  std::optional<std::string> usage = slurm_single_rank_problem(size);
  try {
    if (!usage) status = body(argc, argv);
  } catch (const UsageError& e) {
    usage = e.what();
  } catch (const Error& e) {
    abort_job(e.what(), kExitFault);  // already stamped with file:line and rank
  } catch (const std::exception& e) {
    abort_job(with_rank(e.what(), rank), kExitFault);
  } catch (...) {
    abort_job(with_rank("unknown exception", rank), kExitFault);
  }

  // Closing agreement: MIN over {lowest rank with a usage error (or size), -status}.
  int local[2] = {usage ? rank : size, -status};
  int global[2] = {size, 0};
  MPI_Request request = MPI_REQUEST_NULL;
  if (MPI_Iallreduce(local, global, 2, MPI_INT, MPI_MIN, closing, &request) != MPI_SUCCESS)
    abort_job(with_rank("closing agreement failed", rank), kExitFault);
  if (usage) {
    // The other ranks should be here within moments (same input, same error). If they are not,
    // they are blocked in some collective this rank will never enter: end the job instead.
    const auto deadline = std::chrono::steady_clock::now() + settings.usage_agreement_timeout;
    int done = 0;
    while (true) {
      if (MPI_Test(&request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
        abort_job(with_rank("closing agreement failed", rank), kExitFault);
      if (done) break;
      if (std::chrono::steady_clock::now() > deadline) {
        abort_job(*usage + " (rank " + std::to_string(rank) +
                      "; the other ranks did not stop on this error, so the job is aborted)",
                  kExitUsage);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  } else if (MPI_Wait(&request, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
    abort_job(with_rank("closing agreement failed", rank), kExitFault);
  }

  if (global[0] < size) {
    if (rank == global[0]) print_error_line(*usage);
    status = kExitUsage;
  } else {
    status = -global[1];
  }
  MPI_Comm_free(&closing);
  environment->finalize();
  return status;
}

}  // namespace pets
