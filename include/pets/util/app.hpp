#pragma once
/// \file
/// What the programs share without MPI: their exit statuses, the main of a serial program
/// (run_program), the message of a bad option, and the checks of the paths options name (made at
/// start, so that a wrong path is one clear message before any slow work, not a library's error
/// later). The MPI program runner (run_mpi_program, agree_on_usage) is in pets/comm/program.hpp.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace boost::program_options {
class error;
class options_description;
class variables_map;
}  // namespace boost::program_options

namespace pets {

/// Exit statuses of pets programs.
inline constexpr int kExitSuccess = 0;
inline constexpr int kExitFault = 1;
inline constexpr int kExitUsage = 2;

/// The main of a serial program (no MPI), as run_mpi_program is the MPI programs':
///
///     int main(int argc, char** argv) { return pets::run_program(argc, argv, body); }
///
/// Runs `body` and returns its status. pets::UsageError (bad input): "error: <message>" on
/// stderr, status 2 (kExitUsage); any other exception (a fault): "error: <message>", status 1
/// (kExitFault). stdout is flushed first, so that both streams in one log keep their order. As
/// with run_mpi_program, the body names the program in its usage messages ("pets_synth: ...").
int run_program(int argc, char** argv, const std::function<int(int, char**)>& body);

/// `text` as an unsigned decimal integer, or nullopt for anything else: a sign ("-1", which
/// Boost's unsigned values wrap around to 2^64-1), other characters, nothing, or a value over
/// 2^64-1. Read unsigned options as text and give them to this.
std::optional<std::uint64_t> unsigned_number(const std::string& text);

/// unsigned_number(text), or pets::UsageError "<option> must be an integer in 0 .. 2^64-1, got
/// '<text>'" for anything else. `option` names the option as the message should ("--seed", or
/// "pets_synth: --seed" where the program names itself in its messages).
std::uint64_t unsigned_option(const std::string& text, const std::string& option);

/// The message of a Boost.Program_options error, for any user input. Use it instead of
/// e.what(): Boost 1.74's what() never returns when a value holds the placeholder it stands
/// in for (`--batch-size %value%`, an unknown option `--x%canonical_option%`), because it
/// substitutes until the placeholder is gone. Found by fuzz/fuzz_config.cpp.
std::string program_options_message(const boost::program_options::error& e);

/// The command-line style every program parses with (boost::program_options::command_line_style):
/// Boost's default without allow_guessing, so an abbreviation (`--epoch`, `--over`) is an
/// unknown option rather than silently the option it starts.
int command_line_style();

/// A serial program's command line: stores argv into `vm` by `desc` (command_line_style(); no
/// positional arguments, so a stray one is an error rather than ignored) and runs the notifiers,
/// or, when `desc` has "help" and it is given, prints `desc` on stdout and returns false. A
/// Boost error throws pets::UsageError "<program>: <message> (see --help)".
bool parse_command_line(int argc, char** argv,
                        const boost::program_options::options_description& desc,
                        boost::program_options::variables_map& vm, const std::string& program);

/// What is wrong with reading `path` as a file, or nullopt: "cannot read 'x': <reason>" (missing,
/// no permission), "'x' is a folder, not a file".
std::optional<std::string> input_file_problem(const std::string& path);

/// What is wrong with creating the file `path`, or nullopt: "no folder 'd'" (its folder does not
/// exist), "'d' is a file, not a folder", "'x' is a folder, not a file", "cannot write in 'd':
/// <reason>". Creates nothing.
std::optional<std::string> output_file_problem(const std::string& path);

/// What is wrong with writing into the folder `path`, made if missing, or nullopt: "'x' is a
/// file, not a folder" (`path` or a folder above it), "cannot make a folder in 'd': <reason>",
/// "cannot write in 'x': <reason>". Tries for real: makes and removes a folder of its own in
/// `path`, or in the nearest folder above it that exists (so root, a read-only mount or an ACL
/// give the answer the program would meet later). Leaves nothing behind.
std::optional<std::string> output_folder_problem(const std::string& path);

/// Slurm's one-rank guard: when Slurm started a job step of N > 1 tasks (SLURM_NTASKS and
/// SLURM_STEP_ID set) and this MPI world has one rank, every task is running alone (srun without
/// PMIx, `srun --mpi=none`): N copies of the job, each writing the same files. The message saying
/// so, or nullopt. run_mpi_program checks it for every program before its body runs.
std::optional<std::string> slurm_single_rank_problem(int world_size);

}  // namespace pets
