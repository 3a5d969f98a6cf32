#include "util/heap.h"

#include <malloc.h>

#include <cstdlib>
#include <string>

namespace zeroshard::util {

namespace {

bool glibc_defaults() {
  const char* opt_out = std::getenv("ZEROSHARD_MALLOC_DEFAULT");
  return opt_out != nullptr && std::string(opt_out) == "1";
}

}  // namespace

void heap_for_steps() {
  if (glibc_defaults()) return;
  mallopt(M_MMAP_MAX, 0);         // no block gets a mapping of its own: all come from the heap
  mallopt(M_TRIM_THRESHOLD, -1);  // and the heap is never shrunk
}

StreamingHeap::StreamingHeap() {
  if (glibc_defaults()) return;
  mallopt(M_MMAP_THRESHOLD, 1 << 20);  // a fixed threshold: glibc's dynamic one would climb
  mallopt(M_MMAP_MAX, 1 << 20);
}

StreamingHeap::~StreamingHeap() { heap_for_steps(); }

}  // namespace zeroshard::util
