#include "verify.hpp"

#include "error.hpp"

#include <cinttypes>
#include <cstdio>
#include <cstring>

namespace vblk {

namespace {
constexpr uint32_t kSector = 512;
}

uint64_t pattern_word(uint64_t pos, uint32_t gen)
{
    // splitmix64 of the position and generation: neighbouring words,
    // sectors and generations all differ.
    uint64_t z = pos * 0x9e3779b97f4a7c15ull + gen * 0xbf58476d1ce4e5b9ull + 1;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

VerifyTracker::VerifyTracker(uint64_t region_offset, uint64_t region_size)
    : region_offset_(region_offset), generation_(region_size / kSector),
      busy_(region_size / kSector)
{
}

size_t VerifyTracker::sector_index(uint64_t offset) const
{
    return (offset - region_offset_) / kSector;
}

bool VerifyTracker::can_start(uint64_t offset, uint32_t len) const
{
    size_t first = sector_index(offset);
    for (size_t s = first; s < first + len / kSector; s++) {
        if (busy_[s]) {
            return false;
        }
    }
    return true;
}

void VerifyTracker::start(uint64_t offset, uint32_t len)
{
    size_t first = sector_index(offset);
    for (size_t s = first; s < first + len / kSector; s++) {
        busy_[s]++;
    }
}

void VerifyTracker::finish(uint64_t offset, uint32_t len)
{
    size_t first = sector_index(offset);
    for (size_t s = first; s < first + len / kSector; s++) {
        busy_[s]--;
    }
}

uint32_t VerifyTracker::fill(uint8_t* buf, uint64_t offset, uint32_t len)
{
    uint32_t gen = ++last_generation_;
    if (!gen) {
        gen = ++last_generation_;   // 0 means "never written"
    }
    for (uint32_t at = 0; at < len; at += 8) {
        uint64_t word = pattern_word(offset + at, gen);
        std::memcpy(buf + at, &word, 8);
    }
    return gen;
}

void VerifyTracker::written(uint64_t offset, uint32_t len, uint32_t gen)
{
    size_t first = sector_index(offset);
    for (size_t s = first; s < first + len / kSector; s++) {
        generation_[s] = gen;
    }
}

std::optional<std::string> VerifyTracker::check(const uint8_t* buf,
                                                uint64_t offset, uint32_t len)
{
    for (uint32_t at = 0; at < len; at += kSector) {
        uint32_t gen = generation_[sector_index(offset + at)];
        if (!gen) {
            continue;
        }
        for (uint32_t word_at = at; word_at < at + kSector; word_at += 8) {
            uint64_t want = pattern_word(offset + word_at, gen), got;
            std::memcpy(&got, buf + word_at, 8);
            if (got != want) {
                char text[200];
                std::snprintf(text, sizeof(text),
                              "disk offset %" PRIu64 ": read 0x%016" PRIx64
                              ", expected 0x%016" PRIx64 " (generation %u)",
                              offset + word_at, got, want, gen);
                return std::string(text);
            }
        }
        bytes_checked_ += kSector;
    }
    return std::nullopt;
}

} // namespace vblk
