// The process heap's policy (glibc's mallopt), set by the command that runs.
//
//  - heap_for_steps(): the training step loop's. Every block comes from the heap, which is never
//    shrunk: a freed buffer's bytes stay for the next step's buffer of that size, as a caching
//    allocator would (no page faults on fresh mappings every step); they go back to the system
//    when the process exits. main() sets it first.
//  - StreamingHeap (a scope): one-pass work that holds large temporaries one after another
//    (building the shards from seeded values, streaming writers): blocks of 1 MiB and more get
//    a mapping of their own and go back to the system when freed, so the temporaries leave no
//    high-water mark behind. Blocks kept past the scope stay valid (free() knows a mapped block).
//    Why 1 MiB: with 32 MiB, seed-weights of Qwen3-30B-A3B (18,432 expert tensors of 6.3 MB in
//    fp32, written one after another) took them from the heap, which kept growing (4 of its 48
//    layers: 19.4 GB peak in 73.7 s; all of them: killed at 24 GiB); mapped, the same 4 layers
//    peak at 0.49 GB in 41.9 s (docs/benchmarks.md, "Every seed model at its released size").
//
// ZEROSHARD_MALLOC_DEFAULT=1 keeps glibc's defaults throughout.
#pragma once

namespace zeroshard::util {

void heap_for_steps();

class StreamingHeap {
 public:
  StreamingHeap();
  ~StreamingHeap();
  StreamingHeap(const StreamingHeap&) = delete;
  StreamingHeap& operator=(const StreamingHeap&) = delete;
};

}  // namespace zeroshard::util
