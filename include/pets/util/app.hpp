#pragma once
/// \file
/// What the programs share without MPI: their exit statuses and the message of a bad option.
/// The MPI program runner (run_mpi_program, agree_on_usage) is in pets/comm/program.hpp.

#include <string>

namespace boost::program_options {
class error;
}

namespace pets {

/// Exit statuses of pets programs.
inline constexpr int kExitSuccess = 0;
inline constexpr int kExitFault = 1;
inline constexpr int kExitUsage = 2;

/// The message of a Boost.Program_options error, for any user input. Use it instead of
/// e.what(): Boost 1.74's what() never returns when a value holds the placeholder it stands
/// in for (`--batch-size %value%`, an unknown option `--x%canonical_option%`), because it
/// substitutes until the placeholder is gone. Found by fuzz/fuzz_config.cpp.
std::string program_options_message(const boost::program_options::error& e);

}  // namespace pets
