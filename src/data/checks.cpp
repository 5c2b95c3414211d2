#include "pets/data/checks.hpp"

#include <turbojpeg.h>

#include <type_traits>

#include "pets/util/error.hpp"

namespace pets::data {

void silence_hdf5_errors() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

namespace {
herr_t collect_error(unsigned /*n*/, const H5E_error2_t* err, void* data) {
  auto* out = static_cast<std::string*>(data);
  if (!out->empty()) *out += "; ";
  char major[128] = {0};
  char minor[128] = {0};
  H5Eget_msg(err->maj_num, nullptr, major, sizeof(major));
  H5Eget_msg(err->min_num, nullptr, minor, sizeof(minor));
  *out += std::string(err->func_name ? err->func_name : "?") + ": " + major + ": " + minor;
  if (err->desc && *err->desc) *out += " (" + std::string(err->desc) + ")";
  return 0;
}

herr_t keep_innermost(unsigned n, const H5E_error2_t* err, void* data) {
  if (n != 0) return 0;
  auto* out = static_cast<std::string*>(data);
  char minor[128] = {0};
  H5Eget_msg(err->min_num, nullptr, minor, sizeof(minor));
  const std::string desc = err->desc ? err->desc : "";
  *out = *minor == '\0' ? desc
         : desc.empty() ? std::string(minor)
                        : std::string(minor) + " (" + desc + ")";
  return 0;
}
}  // namespace

std::string hdf5_root_cause() {
  std::string text;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, keep_innermost, &text);
  H5Eclear2(H5E_DEFAULT);
  return text.empty() ? std::string("unknown HDF5 error") : text;
}

std::string hdf5_error_stack() {
  std::string text;
  // Walking upward starts at the innermost frame (the root cause) and ends at the API call.
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, collect_error, &text);
  H5Eclear2(H5E_DEFAULT);
  return text.empty() ? std::string("no HDF5 error stack") : text;
}

void throw_h5_error(const char* call, const char* file, int line) {
  throw_error(std::string(call) + " failed: " + hdf5_error_stack(), file, line);
}

// error.hpp declares the handle as void* to stay free of turbojpeg.h.
static_assert(std::is_same_v<tjhandle, void*>);

void throw_tj_error(void* handle, const char* call, const char* file, int line) {
  const char* text = tjGetErrorStr2(handle);
  throw_error(std::string(call) + " failed: " + (text ? text : "unknown TurboJPEG error"), file,
              line);
}

}  // namespace pets::data
