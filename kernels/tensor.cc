#include "shardflow/tensor.h"

#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <atomic>
#include <map>
#include <mutex>
#include <sstream>

namespace sf {

const char* DTypeName(DType t) {
  switch (t) {
    case DType::kFloat32: return "float32";
    case DType::kFloat64: return "float64";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
    case DType::kBool: return "bool";
    case DType::kBFloat16: return "bfloat16";
    case DType::kFloat16: return "float16";
    case DType::kResource: return "resource";
    case DType::kInt8: return "int8";
    case DType::kInt16: return "int16";
    case DType::kUInt8: return "uint8";
    case DType::kInvalid: break;
  }
  return "invalid";
}

Result<DType> ParseDType(const std::string& n) {
  if (n == "float32" || n == "f32" || n == "float") return DType::kFloat32;
  if (n == "float64" || n == "f64" || n == "double") return DType::kFloat64;
  if (n == "int32" || n == "i32") return DType::kInt32;
  if (n == "int64" || n == "i64") return DType::kInt64;
  if (n == "bool") return DType::kBool;
  if (n == "bfloat16") return DType::kBFloat16;
  if (n == "float16" || n == "half") return DType::kFloat16;
  if (n == "resource") return DType::kResource;
  if (n == "int8") return DType::kInt8;
  if (n == "int16") return DType::kInt16;
  if (n == "uint8") return DType::kUInt8;
  return InvalidArgument("unknown dtype '" + n + "'");
}

size_t DTypeSize(DType t) {
  switch (t) {
    case DType::kFloat32: case DType::kInt32: return 4;
    case DType::kFloat64: case DType::kInt64: case DType::kResource: return 8;
    case DType::kBool: case DType::kInt8: case DType::kUInt8: return 1;
    case DType::kBFloat16: case DType::kFloat16: case DType::kInt16: return 2;
    case DType::kInvalid: break;
  }
  return 0;
}

bool IsFloating(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat64 || t == DType::kBFloat16 || t == DType::kFloat16;
}
bool IsInteger(DType t) {
  return t == DType::kInt32 || t == DType::kInt64 || t == DType::kInt8 || t == DType::kInt16 || t == DType::kUInt8;
}

int64_t NumElements(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::string ShapeString(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? "," : "") + std::to_string(s[i]);
  return out + "]";
}

bool PartialShape::fully_defined() const {
  if (!known_rank_) return false;
  for (int64_t d : dims_) if (d < 0) return false;
  return true;
}

bool PartialShape::CompatibleWith(const PartialShape& o) const {
  if (!known_rank_ || !o.known_rank_) return true;
  if (dims_.size() != o.dims_.size()) return false;
  for (size_t i = 0; i < dims_.size(); ++i)
    if (dims_[i] >= 0 && o.dims_[i] >= 0 && dims_[i] != o.dims_[i]) return false;
  return true;
}

PartialShape PartialShape::Merge(const PartialShape& o) const {
  if (!known_rank_) return o;
  if (!o.known_rank_) return *this;
  Shape d = dims_;
  for (size_t i = 0; i < d.size() && i < o.dims_.size(); ++i) if (d[i] < 0) d[i] = o.dims_[i];
  return PartialShape(d);
}

std::string PartialShape::ToString() const {
  if (!known_rank_) return "<unknown>";
  std::string out = "[";
  for (size_t i = 0; i < dims_.size(); ++i)
    out += (i ? "," : "") + (dims_[i] < 0 ? std::string("?") : std::to_string(dims_[i]));
  return out + "]";
}

namespace {

// Large buffers freed while memory is kept warm, by rounded size: glibc maps
// blocks over 32 MiB (its cap on M_MMAP_THRESHOLD) fresh every time, and the
// kernel zeroes each page of them on first touch (a third of a 64 MiB
// transfer between processes). Bounded by kWarmCacheBytes.
constexpr size_t kWarmMinBytes = size_t{32} << 20;
// Below this a tensor's block is 16-byte aligned; from it, 64-byte aligned.
constexpr size_t kSmallBytes = 4096;
constexpr size_t kWarmCacheBytes = size_t{1} << 30;
std::atomic<bool> g_keep_warm{false};
struct WarmCache {
  std::mutex mu;
  std::multimap<size_t, void*> free;  // GUARDED_BY(mu): rounded size -> block
  size_t bytes = 0;                   // GUARDED_BY(mu)
};
WarmCache& Warm() {
  static WarmCache* c = new WarmCache;  // never destroyed: buffers may die after static destructors
  return *c;
}
// Large blocks are kept in 2 MiB steps so tensors of similar sizes share them.
size_t WarmRound(size_t rounded) { return (rounded + (size_t{2} << 20) - 1) & ~((size_t{2} << 20) - 1); }

// A cached block of at least `rounded` bytes (at most a quarter more), or null.
void* TakeWarm(size_t rounded) {
  WarmCache& c = Warm();
  std::lock_guard<std::mutex> l(c.mu);
  auto it = c.free.lower_bound(rounded);
  if (it == c.free.end() || it->first > rounded + rounded / 4) return nullptr;
  void* p = it->second;
  c.bytes -= it->first;
  c.free.erase(it);
  return p;
}

// Keeps a freed block for reuse; false when the cache is full.
bool KeepWarm(void* p, size_t rounded) {
  WarmCache& c = Warm();
  std::lock_guard<std::mutex> l(c.mu);
  if (c.bytes + rounded > kWarmCacheBytes) return false;
  c.free.emplace(rounded, p);
  c.bytes += rounded;
  return true;
}

}  // namespace

int64_t ReleaseWarmTensorMemory() {
  WarmCache& c = Warm();
  std::multimap<size_t, void*> blocks;
  {
    std::lock_guard<std::mutex> l(c.mu);
    blocks.swap(c.free);
    c.bytes = 0;
  }
  int64_t bytes = 0;
  for (auto& kv : blocks) {
    bytes += static_cast<int64_t>(kv.first);
    std::free(kv.second);
  }
  return bytes;
}

void KeepTensorMemoryWarm() {
  static std::once_flag once;
  std::call_once(once, [] {
    g_keep_warm = true;
    // Blocks up to 1 GiB come from the heap (a 256 MiB tensor received
    // over the network needs its frame and its tensor), and the heap is
    // trimmed only when 1 GiB lies free at its top.
    mallopt(M_MMAP_THRESHOLD, 1 << 30);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
    // One arena: glibc's per-thread arenas cannot hold a block of 64 MiB or
    // more, so threads would mmap and unmap (and page-fault) every large
    // tensor they allocate, whatever the thresholds above say. Measured on a
    // 64 MiB transfer between processes: 0.22 -> 0.77 of raw TCP (and still
    // 1.0 against 0.58 on 2026-12-06, warm cache and all). The price is one
    // lock for every thread's small allocations (a queue with 4 producers at
    // 0.4 of its speed); shardflow's own programs use jemalloc instead
    // (cli/malloc_conf.cc), where these calls change nothing.
    mallopt(M_ARENA_MAX, 1);
  });
}

namespace {

int64_t PhysicalMemory() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : std::numeric_limits<int64_t>::max();
}

thread_local int64_t thread_limit = 0;  // 0: the physical memory

}  // namespace

int64_t AllocationLimit() {
  if (thread_limit > 0) return thread_limit;
  static const int64_t physical = PhysicalMemory();
  return physical;
}

// Limits below 1 MiB are raised to it: tensors smaller than that are never
// checked (AllocatableElements' fast path).
AllocationLimitScope::AllocationLimitScope(int64_t bytes) : previous_(thread_limit) {
  thread_limit = bytes <= 0 ? 0 : std::max<int64_t>(bytes, int64_t{1} << 20);
}
AllocationLimitScope::~AllocationLimitScope() { thread_limit = previous_; }

namespace {

// A 64-byte aligned block of `bytes` (< kSmallBytes) from malloc; the byte
// before it holds its distance from malloc's pointer, for FreeSmall. Null
// when malloc fails.
void* AlignedSmall(size_t bytes) {
  auto* raw = static_cast<unsigned char*>(std::malloc(bytes + 64));
  if (!raw) return nullptr;
  const size_t shift = 64 - reinterpret_cast<uintptr_t>(raw) % 64;  // 1..64: room for the byte
  raw[shift - 1] = static_cast<unsigned char>(shift);
  return raw + shift;
}

void FreeSmall(void* p) {
  auto* data = static_cast<unsigned char*>(p);
  std::free(data - data[-1]);
}

// Whether a block of `bytes` asked for came from AlignedSmall.
bool IsSmall(size_t bytes) { return ((bytes + 63) / 64) * 64 < kSmallBytes; }

}  // namespace

Buffer::Buffer(size_t bytes) : size_(bytes) {
  // Round up: aligned_alloc wants a multiple of the alignment.
  size_t rounded = ((bytes + 63) / 64) * 64;
  if (rounded >= kWarmMinBytes) {
    rounded = WarmRound(rounded);
    if (g_keep_warm.load(std::memory_order_relaxed) && (data_ = TakeWarm(rounded)) != nullptr) {
      capacity_ = rounded;  // the block's own size, kept for its return to the cache
      return;
    }
    capacity_ = rounded;
  }
  // Every block is 64-byte aligned. Eigen vectorizes an assignment from
  // the first aligned element and does the ones before it one by one, which
  // rounds differently (no fused multiply-add): a variable restored into a
  // block of another alignment trained 1 ulp apart from the uninterrupted
  // run (python/tests/test_reference_checkpoints.py on an AVX2 EPYC). Small
  // blocks come from malloc with room to align (AlignedSmall): glibc's
  // aligned_alloc skips its per-thread cache and splits a bigger chunk each
  // time, which cost a third of an op's dispatch in a chain of scalar ops.
  data_ = rounded < kSmallBytes ? AlignedSmall(rounded) : std::aligned_alloc(64, rounded);
  if (!data_) throw AllocationError("out of memory allocating " + std::to_string(bytes) + " bytes");
  // Huge buffers (embedding tables) are read at random rows: ask for 2 MiB
  // pages before the first touch, or every row access misses the TLB (a hint;
  // a no-op where transparent huge pages are off).
  if (data_ && rounded >= (size_t{64} << 20)) {
    const uintptr_t page = 2u << 20;
    const uintptr_t begin = (reinterpret_cast<uintptr_t>(data_) + page - 1) & ~(page - 1);
    const uintptr_t end = (reinterpret_cast<uintptr_t>(data_) + rounded) & ~(page - 1);
    if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
  }
}

Buffer::Buffer(void* data, size_t bytes, std::function<void()> release)
    : data_(data), size_(bytes), release_(std::move(release)) {}

Buffer::~Buffer() {
  if (release_) {
    release_();
  } else if (capacity_ == 0 && IsSmall(size_)) {
    FreeSmall(data_);
  } else if (capacity_ == 0 || !g_keep_warm.load(std::memory_order_relaxed) || !KeepWarm(data_, capacity_)) {
    std::free(data_);
  }
}

Result<Tensor> Tensor::WrapExternal(DType dtype, Shape shape, void* data, std::function<void()> release) {
  if (DTypeSize(dtype) == 0) return InvalidArgument(std::string("cannot wrap memory as dtype ") + DTypeName(dtype));
  for (int64_t d : shape)
    if (d < 0) return InvalidArgument("cannot wrap memory as shape " + ShapeString(shape) + ": a dim is negative");
  if (!release) return InvalidArgument("wrapping external memory needs a release function");
  const int64_t n = NumElements(shape);
  if (n > 0 && data == nullptr) return InvalidArgument("cannot wrap a null pointer as " + ShapeString(shape));
  if (n > 0 && reinterpret_cast<uintptr_t>(data) % 16 != 0)
    return InvalidArgument("cannot wrap memory that is not 16-byte aligned (copy it instead)");
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.num_elements_ = n;
  t.buf_ = std::make_shared<Buffer>(data, n * DTypeSize(dtype), std::move(release));
  return t;
}

namespace {

// The element count of a tensor about to be allocated; throws
// AllocationError when the shape or its size is not allocatable.
int64_t AllocatableElements(DType dtype, const Shape& shape) {
  const int64_t elem = std::max<int64_t>(1, static_cast<int64_t>(DTypeSize(dtype)));
  int64_t n = 1;
  bool overflow = false, empty = false;
  for (int64_t d : shape) {
    if (d < 0) throw AllocationError("a " + std::string(DTypeName(dtype)) + " tensor of shape " + ShapeString(shape) +
                                     " has a negative dimension");
    empty = empty || d == 0;
    overflow = overflow || __builtin_mul_overflow(n, d, &n);
  }
  // An empty tensor is fine whatever its other dimensions.
  if (empty) return 0;
  // Small tensors (nearly all) skip the limit's lookup: no limit is below 1 MiB.
  if (!overflow && n <= (int64_t{1} << 20) / elem) return n;
  const int64_t limit = AllocationLimit();
  if (overflow || n > limit / elem)
    throw AllocationError("a " + std::string(DTypeName(dtype)) + " tensor of shape " + ShapeString(shape) + " needs " +
                          (overflow ? std::string("more than 2^63 elements") : std::to_string(n) + " x " +
                                                                                   std::to_string(elem) + " bytes") +
                          ", past the allocation limit of " + std::to_string(limit) + " bytes");
  return n;
}

}  // namespace

Tensor::Tensor(DType dtype, Shape shape)
    : dtype_(dtype), shape_(std::move(shape)), num_elements_(AllocatableElements(dtype, shape_)) {
  buf_ = std::make_shared<Buffer>(num_elements_ * DTypeSize(dtype_));
}

Tensor Tensor::FromBools(const std::vector<bool>& v, Shape shape) {
  Tensor t(DType::kBool, std::move(shape));
  for (size_t i = 0; i < v.size(); ++i) t.data<bool>()[i] = v[i];
  return t;
}

Tensor Tensor::Zeros(DType dtype, Shape shape) {
  Tensor t(dtype, std::move(shape));
  if (t.bytes()) std::memset(t.raw_data(), 0, t.bytes());
  return t;
}

Result<Tensor> Tensor::Reshaped(Shape shape) const {
  int64_t n = 1;
  bool bad = false;
  for (int64_t d : shape) bad = bad || d < 0 || __builtin_mul_overflow(n, d, &n);
  if (bad || n != num_elements_)
    return InvalidArgument("cannot reshape " + ShapeString(shape_) + " (" +
                           std::to_string(num_elements_) + " elements) to " + ShapeString(shape));
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::Copy() const {
  if (!valid()) return Tensor();
  Tensor t(dtype_, shape_);
  if (bytes()) std::memcpy(t.raw_data(), raw_data(), bytes());
  return t;
}

std::string Tensor::DebugString(int max_values) const {
  std::ostringstream os;
  os << DTypeName(dtype_) << ShapeString(shape_);
  if (!valid() || dtype_ == DType::kResource) return os.str();
  os << " {";
  const int64_t n = std::min<int64_t>(num_elements_, max_values);
  DispatchNumeric(dtype_, [&](auto tag) {
    using T = typename decltype(tag)::type;
    for (int64_t i = 0; i < n; ++i) os << (i ? ", " : "") << +data<T>()[i];
  });
  if (num_elements_ > n) os << ", ...";
  os << "}";
  return os.str();
}

}  // namespace sf
