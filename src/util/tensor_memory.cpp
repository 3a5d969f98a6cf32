#include "util/tensor_memory.h"

#include "util/torch_version.h"

#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>

#include <atomic>
#include <mutex>

namespace zeroshard::util {

namespace {

std::atomic<int64_t> g_live{0};
std::atomic<int64_t> g_peak{0};
std::atomic<bool> g_installed{false};

// Each block starts with a header holding its size, so the deleter (also the raw deleter,
// which sees only the data pointer) knows what it frees. kHeader keeps c10's 64-byte alignment.
constexpr size_t kHeader = 64;

void counted_free(void* data) {
  if (data == nullptr) return;
  char* block = static_cast<char*>(data) - kHeader;
  const auto n = static_cast<int64_t>(*reinterpret_cast<size_t*>(block));
  g_live.fetch_sub(n, std::memory_order_relaxed);
  c10::free_cpu(block);
}

// libtorch 2.3 made c10::Allocator::allocate non-const and added the pure virtual copy_data
// (docs/porting.md, row 6).
#if ZS_TORCH_AT_LEAST(2, 3)
#define ZS_ALLOCATE_CONST
#else
#define ZS_ALLOCATE_CONST const
#endif

class CountingAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) ZS_ALLOCATE_CONST override {
    if (n == 0) return {nullptr, nullptr, &counted_free, c10::Device(c10::DeviceType::CPU)};
    char* block = static_cast<char*>(c10::alloc_cpu(n + kHeader));
    *reinterpret_cast<size_t*>(block) = n;
    const int64_t live = g_live.fetch_add(static_cast<int64_t>(n), std::memory_order_relaxed) + static_cast<int64_t>(n);
    int64_t peak = g_peak.load(std::memory_order_relaxed);
    while (live > peak && !g_peak.compare_exchange_weak(peak, live, std::memory_order_relaxed)) {
    }
    void* data = block + kHeader;
    return {data, data, &counted_free, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &counted_free; }
#if ZS_TORCH_AT_LEAST(2, 3)
  void copy_data(void* dest, const void* src, size_t count) const override { default_copy_data(dest, src, count); }
#endif
};
#undef ZS_ALLOCATE_CONST

}  // namespace

void track_tensor_memory() {
  static std::once_flag once;
  std::call_once(once, [] {
    static CountingAllocator allocator;
    // Priority above the default allocator's registration, which cannot replace it later.
    c10::SetCPUAllocator(&allocator, /*priority=*/100);
    g_installed = true;
  });
}

bool tensor_memory_tracked() { return g_installed.load(); }
int64_t live_tensor_bytes() { return g_live.load(std::memory_order_relaxed); }
int64_t peak_tensor_bytes() { return g_peak.load(std::memory_order_relaxed); }
void reset_peak_tensor_bytes() { g_peak.store(g_live.load(std::memory_order_relaxed), std::memory_order_relaxed); }

}  // namespace zeroshard::util
