#pragma once
/// \file
/// HDF5's error stack as text, for the messages of PETS_H5_CHECK and of the store's own checks,
/// and the switch that silences HDF5's automatic dump of it. The check macros themselves
/// (PETS_H5_CHECK, PETS_TJ_CHECK) are in pets/util/error.hpp, included here; their helpers
/// are defined in data/checks.cpp, which links HDF5 and TurboJPEG.

#include <hdf5.h>

#include <string>

#include "pets/util/error.hpp"

namespace pets::data {

/// Turns off HDF5's automatic printing of its error stack (call once per process; idempotent).
void silence_hdf5_errors();

/// The current HDF5 error stack as one line ("major: minor: description; ..."), then clears it.
std::string hdf5_error_stack();

/// Only the innermost frame of the HDF5 error stack, where the fault was found ("File has been
/// truncated (truncated file: eof = ...)"), then clears the stack: for messages to users, who
/// need the cause, not HDF5's call chain.
std::string hdf5_root_cause();

}  // namespace pets::data
