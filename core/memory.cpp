#include "core/memory.hpp"

#include <climits>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace gdnv {

void keep_freed_memory() {
#if defined(__GLIBC__)
  mallopt(M_MMAP_MAX, 0);              // large blocks from the heap, where free keeps them
  mallopt(M_TRIM_THRESHOLD, INT_MAX);  // and never shrink the heap
#endif
}

}  // namespace gdnv
