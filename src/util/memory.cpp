#include "pets/util/memory.hpp"

#include <malloc.h>

#include <climits>

namespace pets {

bool retain_freed_memory() {
  return mallopt(M_MMAP_MAX, 0) == 1 && mallopt(M_TRIM_THRESHOLD, INT_MAX) == 1 &&
         mallopt(M_TOP_PAD, 64 * 1024 * 1024) == 1;
}

}  // namespace pets
