#pragma once
/// \file
/// Error checks for the two C libraries of the data path: HDF5 and TurboJPEG. A failed call
/// becomes a pets::Error that carries the library's own message, file:line and the rank.

#include <hdf5.h>
#include <turbojpeg.h>

#include <string>

namespace pets::data {

/// Turns off HDF5's automatic printing of its error stack (call once per process; idempotent).
void silence_hdf5_errors();

/// The current HDF5 error stack as one line ("major: minor: description; ..."), then clears it.
std::string hdf5_error_stack();

/// Only the innermost frame of the HDF5 error stack, where the fault was found ("File has been
/// truncated (truncated file: eof = ...)"), then clears the stack: for messages to users, who
/// need the cause, not HDF5's call chain.
std::string hdf5_root_cause();

[[noreturn]] void throw_h5_error(const char* call, const char* file, int line);
[[noreturn]] void throw_tj_error(tjhandle handle, const char* call, const char* file, int line);

/// Returns `value` when the HDF5 call succeeded (non-negative id or status), throws otherwise.
template <typename T>
T h5_check(T value, const char* call, const char* file, int line) {
  if (value < 0) throw_h5_error(call, file, line);
  return value;
}

}  // namespace pets::data

/// Evaluates an HDF5 call that returns an hid_t/herr_t/htri_t/ssize_t; yields its value.
#define PETS_H5_CHECK(call) ::pets::data::h5_check((call), #call, __FILE__, __LINE__)

/// Any non-zero TurboJPEG return, warnings included, throws. Calls where a TJERR_WARNING is
/// acceptable check tjGetErrorCode themselves instead.
#define PETS_TJ_CHECK(handle, call)                                                         \
  do {                                                                                      \
    if ((call) != 0) ::pets::data::throw_tj_error((handle), #call, __FILE__, __LINE__);     \
  } while (0)
