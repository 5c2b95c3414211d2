#include "pets/util/memory.hpp"

#include <malloc.h>

#include <climits>

namespace pets {

bool retain_freed_memory(bool retain) {
  // glibc's defaults: 65536 mmapped chunks, a 128 KiB trim threshold, no top padding (the
  // thresholds then adapt dynamically again only after a restart; this is for comparisons).
  const int mmap_max = retain ? 0 : 65536;
  const int trim = retain ? INT_MAX : 128 * 1024;
  const int top_pad = retain ? 64 * 1024 * 1024 : 0;
  return mallopt(M_MMAP_MAX, mmap_max) == 1 && mallopt(M_TRIM_THRESHOLD, trim) == 1 &&
         mallopt(M_TOP_PAD, top_pad) == 1;
}

}  // namespace pets
