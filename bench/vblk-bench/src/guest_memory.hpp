// Guest RAM as seen from outside QEMU: a file on tmpfs or hugetlbfs that
// QEMU maps as memory-backend-file,share=on and that we map too.
#pragma once

#include <cstdint>
#include <string>

namespace vblk {

// Where guest-physical addresses live in the RAM file on a q35 machine:
// below 4 GiB up to the start of the PCI hole, the rest from 4 GiB up.
struct Q35Layout {
    uint64_t ram_size;
    uint64_t below_4g;

    explicit Q35Layout(uint64_t ram_size);
    // Offset in the RAM file of guest-physical @gpa, or UINT64_MAX if
    // [gpa, gpa + len) is not all RAM.
    uint64_t file_offset(uint64_t gpa, uint64_t len) const;
    // The first RAM address >= @gpa from which @len bytes are contiguous
    // RAM, or UINT64_MAX.
    uint64_t fit(uint64_t gpa, uint64_t len) const;
};

// The directory of a mounted hugetlbfs with 2 MiB pages, or "".
std::string find_hugetlbfs(const std::string& mounts_text);

class GuestMemory {
public:
    // Creates a file of @size bytes in @dir and maps it shared.
    GuestMemory(const std::string& dir, uint64_t size);
    ~GuestMemory();
    GuestMemory(const GuestMemory&) = delete;
    GuestMemory& operator=(const GuestMemory&) = delete;

    const std::string& path() const { return path_; }
    uint64_t size() const { return layout_.ram_size; }
    // The page size of the file system holding it (2 MiB on hugetlbfs).
    uint64_t page_size() const { return page_size_; }
    // Host pointer of guest-physical @gpa; throws if [gpa, gpa+len) is not RAM.
    uint8_t* host(uint64_t gpa, uint64_t len) const;
    // Reserves @len bytes aligned to @align; returns their guest address.
    uint64_t allocate(uint64_t len, uint64_t align);
    uint64_t allocated() const { return next_; }
    // Removes the file's name (QEMU and we keep our mappings).
    void unlink_file();

private:
    std::string path_;
    Q35Layout layout_;
    uint8_t* map_ = nullptr;
    uint64_t page_size_ = 4096;
    uint64_t next_;
    bool linked_ = true;
};

} // namespace vblk
