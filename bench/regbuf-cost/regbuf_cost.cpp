// regbuf-cost: what registering memory as io_uring fixed buffers costs the
// host, measured on a raw ring (the baseline for QEMU's own registration
// of guest RAM, scripts/bench).
//
//   regbuf-cost --size 4g --dir /dev/hugepages [--chunk 1g] [--prefault]
//
// Maps a file of --size in --dir (a hugetlbfs mount for 2 MiB pages, a
// tmpfs such as /dev/shm for 4 KiB pages) shared, as QEMU maps guest RAM
// with memory-backend-file,share=on, without touching it (--prefault:
// writes every page first, untimed, as prealloc=on would), then registers
// it as buffers of --chunk bytes each with one io_uring_register_buffers()
// call.  Prints one JSON object: the wall time of the registration, the
// kernel memory it took (/proc/meminfo: unreclaimable slab plus vmalloc,
// where the kernel keeps each buffer's bvec table), the most bvecs
// that memory can hold at 16 bytes each, and what the kernel's fdinfo of
// the ring lists.  Needs RLIMIT_MEMLOCK (raised here when run as root).

#include <liburing.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>
#include <vector>

namespace {

struct Options {
    uint64_t size = 1ull << 30;
    uint64_t chunk = 1ull << 30;
    std::string dir = "/dev/shm";
    bool prefault = false;
};

[[noreturn]] void fail(const std::string& what)
{
    throw std::runtime_error(what);
}

uint64_t parse_size(const std::string& text)
{
    size_t used = 0;
    uint64_t value = std::stoull(text, &used);
    std::string unit = text.substr(used);
    if (unit == "k" || unit == "K") {
        return value << 10;
    }
    if (unit == "m" || unit == "M") {
        return value << 20;
    }
    if (unit == "g" || unit == "G") {
        return value << 30;
    }
    if (!unit.empty()) {
        fail("not a size: " + text);
    }
    return value;
}

Options parse_options(int argc, char** argv)
{
    Options o;
    for (int i = 1; i < argc; i++) {
        std::string name = argv[i];
        if (name == "--prefault") {
            o.prefault = true;
            continue;
        }
        if (i + 1 == argc) {
            fail("usage: regbuf-cost --size N --dir DIR [--chunk N] [--prefault]");
        }
        std::string value = argv[++i];
        if (name == "--size") {
            o.size = parse_size(value);
        } else if (name == "--chunk") {
            o.chunk = parse_size(value);
        } else if (name == "--dir") {
            o.dir = value;
        } else {
            fail("unknown option " + name);
        }
    }
    if (!o.chunk || o.chunk > (1ull << 30)) {
        fail("--chunk: from one byte to 1 GiB (the kernel's limit per buffer)");
    }
    return o;
}

// The fields of /proc/meminfo, in KiB.
std::map<std::string, int64_t> meminfo()
{
    std::map<std::string, int64_t> fields;
    std::ifstream in("/proc/meminfo");
    std::string name;
    int64_t kib;
    while (in >> name >> kib) {
        name.pop_back();    // the colon
        fields[name] = kib;
        in.ignore(64, '\n');
    }
    return fields;
}

int64_t kernel_kib(const std::map<std::string, int64_t>& m)
{
    return m.at("SUnreclaim") + m.at("VmallocUsed");
}

// The "UserBufs:" count of the ring's fdinfo: what the kernel holds.
long kernel_user_bufs(int ring_fd)
{
    std::ifstream in("/proc/self/fdinfo/" + std::to_string(ring_fd));
    std::string line;
    while (std::getline(in, line)) {
        if (line.starts_with("UserBufs:")) {
            return std::stol(line.substr(9));
        }
    }
    return -1;
}

void raise_memlock()
{
    rlimit unlimited{RLIM_INFINITY, RLIM_INFINITY};
    setrlimit(RLIMIT_MEMLOCK, &unlimited);  // fails quietly when not root
}

class MappedFile {
public:
    MappedFile(const std::string& dir, uint64_t size) : size_(size)
    {
        std::string path = dir + "/regbuf-cost.XXXXXX";
        std::vector<char> name(path.begin(), path.end());
        name.push_back('\0');
        int fd = ::mkstemp(name.data());
        if (fd < 0) {
            fail(dir + ": " + std::strerror(errno));
        }
        ::unlink(name.data());
        if (::ftruncate(fd, static_cast<off_t>(size)) < 0) {
            int err = errno;
            ::close(fd);
            fail("cannot size the file to " + std::to_string(size) + ": " + std::strerror(err));
        }
        addr_ = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        ::close(fd);
        if (addr_ == MAP_FAILED) {
            fail(std::string("mmap: ") + std::strerror(errno));
        }
    }
    ~MappedFile() { ::munmap(addr_, size_); }
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;

    char* data() const { return static_cast<char*>(addr_); }

private:
    void* addr_ = MAP_FAILED;
    uint64_t size_;
};

int run(const Options& o)
{
    raise_memlock();
    MappedFile file(o.dir, o.size);
    if (o.prefault) {
        for (uint64_t at = 0; at < o.size; at += 4096) {
            file.data()[at] = 1;
        }
    }
    std::vector<iovec> chunks;
    for (uint64_t at = 0; at < o.size; at += o.chunk) {
        chunks.push_back({file.data() + at, static_cast<size_t>(std::min(o.chunk, o.size - at))});
    }
    io_uring ring;
    if (int err = io_uring_queue_init(8, &ring, 0); err < 0) {
        fail(std::string("io_uring_queue_init: ") + std::strerror(-err));
    }
    auto before = meminfo();
    auto start = std::chrono::steady_clock::now();
    int err = io_uring_register_buffers(&ring, chunks.data(), static_cast<unsigned>(chunks.size()));
    auto registered = std::chrono::steady_clock::now();
    auto after = meminfo();
    if (err < 0) {
        io_uring_queue_exit(&ring);
        fail(std::string("io_uring_register_buffers: ") + std::strerror(-err));
    }
    long listed = kernel_user_bufs(ring.ring_fd);
    auto unstart = std::chrono::steady_clock::now();
    io_uring_unregister_buffers(&ring);
    auto unregistered = std::chrono::steady_clock::now();
    io_uring_queue_exit(&ring);

    using seconds = std::chrono::duration<double>;
    int64_t kernel = kernel_kib(after) - kernel_kib(before);
    std::printf("{\"size\": %llu, \"chunk\": %llu, \"chunks\": %zu, \"dir\": \"%s\", "
                "\"prefault\": %s, "
                "\"register_s\": %.6f, \"unregister_s\": %.6f, "
                "\"kernel_kib\": %lld, \"slab_kib\": %lld, \"vmalloc_kib\": %lld, "
                "\"bvecs_at_most\": %lld, \"fdinfo_user_bufs\": %ld}\n",
                static_cast<unsigned long long>(o.size), static_cast<unsigned long long>(o.chunk),
                chunks.size(), o.dir.c_str(), o.prefault ? "true" : "false",
                seconds(registered - start).count(), seconds(unregistered - unstart).count(),
                static_cast<long long>(kernel),
                static_cast<long long>(after.at("SUnreclaim") - before.at("SUnreclaim")),
                static_cast<long long>(after.at("VmallocUsed") - before.at("VmallocUsed")),
                static_cast<long long>(kernel * 1024 / 16), listed);
    return 0;
}

} // namespace

int main(int argc, char** argv)
{
    try {
        return run(parse_options(argc, argv));
    } catch (const std::exception& e) {
        std::fprintf(stderr, "regbuf-cost: %s\n", e.what());
        return 1;
    }
}
