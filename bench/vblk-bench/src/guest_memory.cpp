#include "guest_memory.hpp"

#include "error.hpp"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sstream>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

namespace vblk {

namespace {

constexpr uint64_t k4G = 1ull << 32;
// Below 1 MiB are the legacy VGA and BIOS areas: we leave them alone.
constexpr uint64_t kFirstUsable = 1ull << 20;

uint64_t align_up(uint64_t value, uint64_t align)
{
    return (value + align - 1) / align * align;
}

} // namespace

Q35Layout::Q35Layout(uint64_t size)
    : ram_size(size),
      // hw/i386/pc_q35.c: RAM below 4 GiB ends at 2 GiB once there is
      // more than 2.75 GiB of it.
      below_4g(size >= 0xb0000000ull ? std::min<uint64_t>(size, 0x80000000ull)
                                     : size)
{
}

uint64_t Q35Layout::file_offset(uint64_t gpa, uint64_t len) const
{
    if (gpa + len <= below_4g) {
        return gpa;
    }
    uint64_t above = ram_size - below_4g;
    if (gpa >= k4G && gpa - k4G + len <= above) {
        return below_4g + (gpa - k4G);
    }
    return UINT64_MAX;
}

uint64_t Q35Layout::fit(uint64_t gpa, uint64_t len) const
{
    if (gpa + len <= below_4g) {
        return gpa;
    }
    uint64_t high = std::max(gpa, k4G);
    return file_offset(high, len) == UINT64_MAX ? UINT64_MAX : high;
}

std::string find_hugetlbfs(const std::string& mounts_text)
{
    std::istringstream lines(mounts_text);
    std::string device, dir, type, options;
    std::string line;
    while (std::getline(lines, line)) {
        std::istringstream fields(line);
        if (!(fields >> device >> dir >> type >> options) || type != "hugetlbfs") {
            continue;
        }
        // The default page size of the mount is 2 MiB unless it says so.
        if (options.find("pagesize=") == std::string::npos ||
            options.find("pagesize=2M") != std::string::npos) {
            return dir;
        }
    }
    return "";
}

GuestMemory::GuestMemory(const std::string& dir, uint64_t size)
    : layout_(size), next_(kFirstUsable)
{
    path_ = dir + "/vblk-bench-ram-XXXXXX";
    int fd = ::mkstemp(path_.data());
    if (fd < 0) {
        throw BenchError("cannot create guest RAM file in " + dir + ": " +
                         std::strerror(errno));
    }
    if (::ftruncate(fd, static_cast<off_t>(size)) < 0) {
        int err = errno;
        ::close(fd);
        ::unlink(path_.c_str());
        throw BenchError("cannot size " + path_ + " to " + std::to_string(size) +
                         " bytes: " + std::strerror(err));
    }
    struct statfs fs{};
    if (::fstatfs(fd, &fs) == 0) {
        page_size_ = static_cast<uint64_t>(fs.f_bsize);
    }
    void* map = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    int err = errno;
    ::close(fd);
    if (map == MAP_FAILED) {
        ::unlink(path_.c_str());
        throw BenchError("cannot map " + path_ + ": " + std::strerror(err) +
                         (err == ENOMEM ? " (not enough free hugepages?)" : ""));
    }
    map_ = static_cast<uint8_t*>(map);
}

GuestMemory::~GuestMemory()
{
    ::munmap(map_, layout_.ram_size);
    unlink_file();
}

void GuestMemory::unlink_file()
{
    if (linked_) {
        ::unlink(path_.c_str());
        linked_ = false;
    }
}

uint8_t* GuestMemory::host(uint64_t gpa, uint64_t len) const
{
    uint64_t offset = layout_.file_offset(gpa, len);
    if (offset == UINT64_MAX) {
        throw BenchError("guest address " + std::to_string(gpa) + " is not RAM");
    }
    return map_ + offset;
}

uint64_t GuestMemory::allocate(uint64_t len, uint64_t align)
{
    uint64_t gpa = layout_.fit(align_up(next_, align), len);
    if (gpa == UINT64_MAX) {
        throw BenchError("guest RAM of " + std::to_string(layout_.ram_size >> 20) +
                         " MiB is too small (--mem)");
    }
    next_ = gpa + len;
    return gpa;
}

} // namespace vblk
