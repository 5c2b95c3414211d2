#pragma once
/// \file
/// Crash-safe file replacement: write to a temporary file beside the target, fsync it, rename it
/// over the target, fsync the folder. A reader sees the old file or the whole new one, never part.

#include <string>

namespace pets {

/// Writes `contents` to `path` atomically; throws pets::Error naming the path on any failure
/// (the temporary file is removed, `path` is untouched).
void write_file_atomically(const std::string& path, const std::string& contents);

}  // namespace pets
