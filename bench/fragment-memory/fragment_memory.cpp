// Fragment the host's free memory, reproducibly, as a long-running host's is.
//
//   fragment-memory --size SIZE
//
// Takes SIZE of memory in 4 KiB pages (transparent hugepages refused),
// then gives back every other page: SIZE / 2 of free memory in single
// 4 KiB holes, each between two pages this process holds.  The page
// allocator serves a request for one page from the smallest free blocks
// first, so whatever allocates 4 KiB pages next (guest RAM, a buffer)
// gets holes, physically scattered, until SIZE / 2 is used up, however
// much free memory in large blocks the host has besides.  The pages it
// holds are locked (MLOCK_ONFAULT: the holes stay holes), so with
// vm.compact_unevictable_allowed=0 compaction cannot move them to join
// the holes again.  Prints "ready HELD FREED" (bytes) on stdout, then
// holds the memory until killed.
//
// The caller owns the sysctls (compaction) and the reservation of any
// hugepages it needs before: this tool only allocates.

#include <sys/mman.h>

#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>

namespace {

constexpr std::size_t page = 4096;

std::uint64_t mem_free_bytes()
{
    std::ifstream meminfo("/proc/meminfo");
    std::string key;
    std::uint64_t kib = 0;
    std::string unit;
    while (meminfo >> key >> kib >> unit) {
        if (key == "MemFree:") {
            return kib * 1024;
        }
    }
    return 0;
}

std::uint64_t parse_size(const char* text)
{
    char* end = nullptr;
    std::uint64_t value = std::strtoull(text, &end, 10);
    switch (*end) {
    case 'k': case 'K': return value << 10;
    case 'm': case 'M': return value << 20;
    case 'g': case 'G': return value << 30;
    case '\0': return value;
    default:
        std::cerr << "fragment-memory: bad size " << text << "\n";
        std::exit(2);
    }
}

[[noreturn]] void fail(const char* what)
{
    std::cerr << "fragment-memory: " << what << ": " << std::strerror(errno) << "\n";
    std::exit(1);
}

}  // namespace

int main(int argc, char** argv)
{
    if (argc != 3 || std::string(argv[1]) != "--size") {
        std::cerr << "usage: fragment-memory --size SIZE\n";
        return 2;
    }
    const std::size_t size = parse_size(argv[2]) / (2 * page) * (2 * page);
    if (size == 0 || size + (256u << 20) > mem_free_bytes()) {
        std::cerr << "fragment-memory: not enough free memory for " << (size >> 20)
                  << " MiB\n";
        return 1;
    }

    void* area = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                      -1, 0);
    if (area == MAP_FAILED) {
        fail("mmap");
    }
    if (madvise(area, size, MADV_NOHUGEPAGE) != 0) {
        fail("madvise(MADV_NOHUGEPAGE)");
    }
    if (madvise(area, size, MADV_POPULATE_WRITE) != 0) {
        fail("madvise(MADV_POPULATE_WRITE)");
    }
    auto* bytes = static_cast<unsigned char*>(area);
    for (std::size_t off = page; off < size; off += 2 * page) {
        if (madvise(bytes + off, page, MADV_DONTNEED) != 0) {
            fail("madvise(MADV_DONTNEED)");
        }
    }
    if (mlock2(area, size, MLOCK_ONFAULT) != 0) {
        fail("mlock2(MLOCK_ONFAULT)");
    }
    std::cout << "ready " << size / 2 << " " << size / 2 << std::endl;

    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigprocmask(SIG_BLOCK, &set, nullptr);
    int sig = 0;
    sigwait(&set, &sig);
    return 0;
}
