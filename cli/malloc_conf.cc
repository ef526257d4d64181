// jemalloc's settings for shardflow's programs: the `shardflow` CLI (nodes),
// the examples and the benchmarks link jemalloc when CMake finds it
// (SF_JEMALLOC, docs/DEPENDENCIES.md), and jemalloc reads this string at
// its first allocation.
//
// Why jemalloc: glibc's malloc serialised the small allocations of every
// thread (messages, continuations, scalar tensors) on its arena locks; a
// queue moved 0.11M enqueue/dequeue pairs per second with glibc and 1.03M
// with jemalloc (bench_queue --json, one producer). glibc with one arena per
// thread was faster for the queue (0.14M) but page-faulted every large
// tensor a peer sent (M_ARENA_MAX, kernels/tensor.cc).
//
// oversize_threshold 0: no separate arena for blocks over 8 MiB, which
// jemalloc otherwise returns to the kernel at once (a 256 MiB transfer
// between processes then ran at half the speed, faulting its pages in at
// every arrival); idle pages go back to the kernel after 10 s instead.
extern "C" {
const char* malloc_conf = "oversize_threshold:0,dirty_decay_ms:10000,muzzy_decay_ms:10000";
}
