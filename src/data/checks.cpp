// The helper of PETS_TJ_CHECK (pets/util/error.hpp), here because data links TurboJPEG; the
// helper of PETS_H5_CHECK is in data/h5.cpp.
#include <turbojpeg.h>

#include <type_traits>

#include "pets/util/error.hpp"

namespace pets::data {

// error.hpp declares the handle as void* to stay free of turbojpeg.h.
static_assert(std::is_same_v<tjhandle, void*>);

void throw_tj_error(void* handle, const char* call, const char* file, int line) {
  const char* text = tjGetErrorStr2(handle);
  throw_error(std::string(call) + " failed: " + (text ? text : "unknown TurboJPEG error"), file,
              line);
}

}  // namespace pets::data
