// SPDX-License-Identifier: GPL-2.0-or-later
//
// LD_PRELOAD library that counts a process's heap allocations and tracks
// its live heap bytes.  At exit it appends one line to $MALLOC_COUNT_OUT:
//
//   allocs=N other_thread_allocs=N frees=N live_bytes=N peak_live_bytes=N
//   vm_hwm_kb=N vm_rss_kb=N
//
// other_thread_allocs counts the allocations made outside the main thread:
// with an iothread, those of the device's I/O path.
//
// Every allocating entry point of glibc's malloc is wrapped and forwards
// to glibc's own __libc_* implementation, so nothing else changes.

#include <malloc.h>
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

extern "C" {
void* __libc_malloc(size_t size);
void* __libc_calloc(size_t nmemb, size_t size);
void* __libc_realloc(void* ptr, size_t size);
void* __libc_memalign(size_t alignment, size_t size);
void __libc_free(void* ptr);
}

namespace {

struct Counters {
    std::atomic<uint64_t> allocs{0};
    std::atomic<uint64_t> other_thread_allocs{0};
    std::atomic<uint64_t> frees{0};
    std::atomic<int64_t> live_bytes{0};
    std::atomic<int64_t> peak_live_bytes{0};
};

Counters counters;

bool on_main_thread()
{
    static thread_local const bool main_thread = ::gettid() == ::getpid();
    return main_thread;
}

void note_alloc(void* ptr)
{
    if (!ptr) {
        return;
    }
    counters.allocs.fetch_add(1, std::memory_order_relaxed);
    if (!on_main_thread()) {
        counters.other_thread_allocs.fetch_add(1, std::memory_order_relaxed);
    }
    const auto size = static_cast<int64_t>(malloc_usable_size(ptr));
    const int64_t live = counters.live_bytes.fetch_add(size, std::memory_order_relaxed) + size;
    int64_t peak = counters.peak_live_bytes.load(std::memory_order_relaxed);
    while (live > peak &&
           !counters.peak_live_bytes.compare_exchange_weak(peak, live, std::memory_order_relaxed)) {
    }
}

void note_free(void* ptr)
{
    if (!ptr) {
        return;
    }
    counters.frees.fetch_add(1, std::memory_order_relaxed);
    counters.live_bytes.fetch_sub(static_cast<int64_t>(malloc_usable_size(ptr)),
                                  std::memory_order_relaxed);
}

// "VmHWM:" and the like from /proc/self/status, in kB, or -1
long status_kb(const char* text, const char* field)
{
    const char* at = std::strstr(text, field);
    return at ? std::strtol(at + std::strlen(field), nullptr, 10) : -1;
}

__attribute__((destructor)) void report()
{
    const char* path = std::getenv("MALLOC_COUNT_OUT");
    if (!path) {
        return;
    }
    char status[8192] = {};
    if (int fd = ::open("/proc/self/status", O_RDONLY); fd >= 0) {
        [[maybe_unused]] ssize_t n = ::read(fd, status, sizeof(status) - 1);
        ::close(fd);
    }
    char line[256];
    const int len = std::snprintf(
        line, sizeof(line),
        "allocs=%llu other_thread_allocs=%llu frees=%llu live_bytes=%lld peak_live_bytes=%lld "
        "vm_hwm_kb=%ld vm_rss_kb=%ld\n",
        static_cast<unsigned long long>(counters.allocs.load()),
        static_cast<unsigned long long>(counters.other_thread_allocs.load()),
        static_cast<unsigned long long>(counters.frees.load()),
        static_cast<long long>(counters.live_bytes.load()),
        static_cast<long long>(counters.peak_live_bytes.load()),
        status_kb(status, "VmHWM:"), status_kb(status, "VmRSS:"));
    if (int fd = ::open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644); fd >= 0) {
        [[maybe_unused]] ssize_t n = ::write(fd, line, static_cast<size_t>(len));
        ::close(fd);
    }
}

}  // namespace

extern "C" {

void* malloc(size_t size)
{
    void* ptr = __libc_malloc(size);
    note_alloc(ptr);
    return ptr;
}

void* calloc(size_t nmemb, size_t size)
{
    void* ptr = __libc_calloc(nmemb, size);
    note_alloc(ptr);
    return ptr;
}

void* realloc(void* old, size_t size)
{
    // Counted as a free and an allocation: it may move.
    const auto old_size = old ? static_cast<int64_t>(malloc_usable_size(old)) : 0;
    void* ptr = __libc_realloc(old, size);
    if (ptr || size == 0) {
        if (old) {
            counters.frees.fetch_add(1, std::memory_order_relaxed);
            counters.live_bytes.fetch_sub(old_size, std::memory_order_relaxed);
        }
        note_alloc(ptr);
    }
    return ptr;
}

void* memalign(size_t alignment, size_t size)
{
    void* ptr = __libc_memalign(alignment, size);
    note_alloc(ptr);
    return ptr;
}

void* aligned_alloc(size_t alignment, size_t size)
{
    return memalign(alignment, size);
}

void* valloc(size_t size)
{
    return memalign(static_cast<size_t>(sysconf(_SC_PAGESIZE)), size);
}

int posix_memalign(void** out, size_t alignment, size_t size)
{
    if (alignment % sizeof(void*) != 0 || (alignment & (alignment - 1)) != 0) {
        return EINVAL;
    }
    void* ptr = memalign(alignment, size);
    if (!ptr) {
        return ENOMEM;
    }
    *out = ptr;
    return 0;
}

void free(void* ptr)
{
    note_free(ptr);
    __libc_free(ptr);
}

}  // extern "C"
