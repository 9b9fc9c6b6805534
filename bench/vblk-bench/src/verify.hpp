// Verify mode: every byte written carries a pattern derived from its disk
// offset and the write's generation, and every read is checked against
// what was last written there.  Requests in flight never overlap.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace vblk {

// The pattern word at disk offset @pos (a multiple of 8) in generation @gen.
uint64_t pattern_word(uint64_t pos, uint32_t gen);

class VerifyTracker {
public:
    VerifyTracker(uint64_t region_offset, uint64_t region_size);

    // False if [offset, offset + len) overlaps a request in flight.
    bool can_start(uint64_t offset, uint32_t len) const;
    void start(uint64_t offset, uint32_t len);
    void finish(uint64_t offset, uint32_t len);

    // Fills @buf with a new generation's pattern for a write at @offset;
    // returns the generation to pass to written().
    uint32_t fill(uint8_t* buf, uint64_t offset, uint32_t len);
    void written(uint64_t offset, uint32_t len, uint32_t gen);
    // Checks a read's data; a description of the first bad byte, or
    // nullopt.  Sectors never written are not checked.
    std::optional<std::string> check(const uint8_t* buf, uint64_t offset,
                                     uint32_t len);

    uint64_t bytes_checked() const { return bytes_checked_; }

private:
    size_t sector_index(uint64_t offset) const;

    uint64_t region_offset_;
    std::vector<uint32_t> generation_;   // per sector, 0: never written
    std::vector<uint8_t> busy_;          // per sector, requests in flight
    uint32_t last_generation_ = 0;
    uint64_t bytes_checked_ = 0;
};

} // namespace vblk
