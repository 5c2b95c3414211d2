#pragma once
/// \file
/// The --out folder of a run: one run at a time (a lock held for the whole run), and no new run
/// mixed into an earlier one's files unless the user says what to do (--resume to continue it,
/// --overwrite to start over). Rank 0 opens it before anything is written; LibTorch-free, so it
/// is tested without a model.
///
/// The lock is flock(2) on `<out>/.pets_train.lock`, which holds a line naming its holder (pid,
/// host, start time, Slurm job). flock works on local file systems and on NFS (as a POSIX lock);
/// where the file system refuses locks (Lustre mounted without -o flock), the run goes on
/// unprotected with a warning.

#include <cstddef>
#include <string>
#include <vector>

#include "pets/train/options/options.hpp"

namespace pets::train {

/// The files of a run that pets_train writes into --out, found by their names: only these are
/// ever removed (--overwrite); anything else in the folder is the user's.
struct RunFiles {
  std::vector<std::string> checkpoints;  ///< ckpt-<N>.safetensors and the ranks' shards of them
  std::vector<std::string>
      results;  ///< latest, metrics.jsonl, confusion.json, model/best.safetensors
  std::vector<std::string> temporaries;  ///< <one of the above>.tmp.<host>.<pid>, left by a crash

  /// Whether the folder holds (part of) a run: a checkpoint or a result file.
  bool holds_run() const { return !checkpoints.empty() || !results.empty(); }
  /// Every listed name.
  std::vector<std::string> all() const;
  /// "metrics.jsonl, model.safetensors, latest and 3 checkpoints", for messages.
  std::string describe() const;
};

/// The run files in `dir` (none when it does not exist or is not a folder).
RunFiles find_run_files(const std::string& dir);

/// The lock file's name inside --out.
inline constexpr const char* kRunLockName = ".pets_train.lock";

/// Rank 0's hold on --out for a whole run.
class RunFolder {
 public:
  /// Opens `dir` for a run asked for with `resume` and `overwrite` (TrainOptions). Throws
  /// pets::UsageError (nothing created) when: `resume` is kYes and `dir` does not exist; `dir`
  /// is a file or cannot be created; another process holds its lock (the message names the
  /// folder and the holder); `resume` is kNo without `overwrite` and `dir` holds a run;
  /// `resume` is kYes or kAuto and `dir` holds run files but no checkpoint. Creates `dir` when
  /// missing and takes its lock.
  RunFolder(const std::string& dir, ResumeMode resume, bool overwrite);
  /// Releases the lock. A folder this object created that holds nothing but the lock file (the
  /// run ended before writing) is removed.
  ~RunFolder();
  RunFolder(const RunFolder&) = delete;
  RunFolder& operator=(const RunFolder&) = delete;

  const std::string& dir() const { return dir_; }
  /// Whether the run continues from a checkpoint in the folder.
  bool resume() const { return resume_; }
  /// What the folder held when it was opened.
  const RunFiles& earlier() const { return earlier_; }
  /// Lines for the user (a lock the file system refused, --resume=auto starting afresh).
  const std::vector<std::string>& notices() const { return notices_; }
  /// With --overwrite: removes the files earlier() lists, nothing else. Returns how many it
  /// removed; throws pets::UsageError naming a file it cannot remove.
  std::size_t remove_earlier_run();

 private:
  void lock();
  /// The destructor's work: the lock released, a folder left empty by this run removed.
  void release();

  std::string dir_;
  std::string lock_path_;
  int fd_ = -1;
  bool created_ = false;
  bool resume_ = false;
  RunFiles earlier_;
  std::vector<std::string> notices_;
};

}  // namespace pets::train
