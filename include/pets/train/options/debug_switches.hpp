#pragma once
/// \file
/// The environment variables pets_train reads for tests and comparisons, all read here, once.
/// None changes what a normal run computes; each is described in docs/testing.md.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace pets::train {

/// PETS_INJECT_FAULT="KIND:RANK:STEP": rank RANK meets fault KIND at global step STEP, just before
/// that step's allreduce (so its peers wait inside a collective). KIND is sigkill, abort, exit1,
/// exit0 (exit before MPI_Finalize), throw (a pets::Error), or skew: this rank's reduced
/// gradients are altered after the allreduce (a collective that delivered different results),
/// which PETS_VERIFY_RANKS must catch. Another KIND is announced and does nothing.
struct FaultSpec {
  std::string kind;
  int rank = -1;
  std::int64_t step = -1;
};

/// PETS_PAUSE_WRITE="NAME:SECONDS": when rank 0 writes the file NAME in --out (model.safetensors,
/// latest, metrics.jsonl, ckpt-N.safetensors), it pauses SECONDS after the temporary file is
/// complete and before the rename, announced on stderr, so that a test can stop or kill it there.
struct WritePause {
  std::string file_name;
  double seconds = 0.0;
};

/// PETS_PAUSE_STEP="STEP:SECONDS": rank 0 spends SECONDS more in global step STEP, just before its
/// allreduce, announced on stderr; unlike PETS_PAUSE_EVAL no signal ends it (a long step in
/// flight, as a CPU step of a large batch), so that a test can stop the run there.
struct StepPause {
  std::int64_t step = -1;
  double seconds = 0.0;
};

/// PETS_DUMP_STEPS="DIR:N": every rank writes what the run's first N training steps took and
/// made into DIR (step_dump.hpp), for bench/step_compare.py.
struct StepDumpSpec {
  std::string dir;
  std::int64_t steps = 0;
};

/// The switches, read once.
struct DebugSwitches {
  std::optional<FaultSpec> inject_fault;  ///< PETS_INJECT_FAULT (unset or malformed: none)
  bool unfolded = false;        ///< PETS_UNFOLDED: BatchNorm never folded, no evaluation cache
  bool verify_ranks = false;    ///< PETS_VERIFY_RANKS: digests of gradients and model compared
  bool default_malloc = false;  ///< PETS_DEFAULT_MALLOC: glibc's allocator settings kept
  /// PETS_NATIVE_BATCHNORM: on CUDA, a backbone in train mode runs LibTorch's BatchNorm, ReLU and
  /// add rather than the fused kernel (train_mode_forward.hpp), to compare against.
  bool native_batchnorm = false;
  /// PETS_NATIVE_CONV: on CUDA, the folded backbone runs LibTorch's convolution, add and ReLU
  /// rather than cuDNN's fused convolution (fused_folded_conv, backbone_forward.hpp).
  bool native_conv = false;
  /// PETS_NO_WARM_UP: on CUDA, no warm-up forward before the first epoch (Backend::warm_up), so
  /// that the first epoch pays the first calls' set-up, to compare against.
  bool no_warm_up = false;
  std::optional<WritePause> pause_write;  ///< PETS_PAUSE_WRITE (unset or malformed: none)
  /// PETS_PAUSE_EVAL="SECONDS": rank 0 pauses SECONDS after each evaluation's first batch,
  /// announced on stderr (a stop signal ends the pause), so that a test can signal it there.
  double pause_eval_seconds = 0.0;
  std::optional<StepPause> pause_step;     ///< PETS_PAUSE_STEP (unset or malformed: none)
  std::optional<StepDumpSpec> dump_steps;  ///< PETS_DUMP_STEPS (unset or malformed: none)

  /// From this process's environment; a switch is on when its variable is set (to anything).
  static DebugSwitches from_environment();
  /// From `lookup(name)`, which returns a variable's value or nullptr when it is unset.
  static DebugSwitches from(const std::function<const char*(const char*)>& lookup);
};

/// Applies the switches that act outside the training loop (PETS_PAUSE_WRITE, in the atomic
/// file writer).
void apply_process_switches(const DebugSwitches& switches);

/// "NAME:SECONDS" (a file name without '/', SECONDS >= 0), or nothing when malformed.
std::optional<WritePause> parse_write_pause(const std::string& text);

/// "STEP:SECONDS" (STEP >= 0, SECONDS >= 0), or nothing when malformed.
std::optional<StepPause> parse_step_pause(const std::string& text);

/// "DIR:N" (DIR not empty, N >= 1), or nothing when malformed.
std::optional<StepDumpSpec> parse_step_dump(const std::string& text);

/// "KIND:RANK:STEP" (KIND of [a-z0-9], at most 15 characters), or nothing when malformed.
std::optional<FaultSpec> parse_fault_spec(const std::string& text);

/// When `fault` names this `rank` and global `step`: announces it on stderr and applies it (the
/// process dies, exits, or this throws pets::Error). Returns true for "skew", which the caller
/// applies; false otherwise.
bool inject_fault(const std::optional<FaultSpec>& fault, int rank, std::int64_t step);

}  // namespace pets::train
