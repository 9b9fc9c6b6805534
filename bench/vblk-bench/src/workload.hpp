// What requests to issue: pattern, direction, sizes, fragmentation.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace vblk {

enum class Op : uint8_t { read, write };

struct Request {
    Op op;
    uint64_t offset;     // bytes from the start of the disk
    uint32_t len;        // bytes, a multiple of 512
    uint32_t segments;
};

// Block sizes: one ("4k"), a list ("4k,16k") or a range ("512-1m",
// any multiple of 512 in it).
struct BlockSizes {
    std::vector<uint32_t> choices;     // list (or the one size)
    uint32_t range_min = 0, range_max = 0;

    uint32_t largest() const;
    uint32_t smallest() const;
    std::string describe() const;
};

// "4k", "1M", "512", "2g" -> bytes; nullopt on anything else.
std::optional<uint64_t> parse_size(const std::string& text);
// As parse_size, but also "A-B" and "A,B,..."; nullopt if malformed or
// a size is not a positive multiple of 512.
std::optional<BlockSizes> parse_block_sizes(const std::string& text);
// 4096 -> "4k", 8388608 -> "8m", 1536 -> "1536"
std::string format_size(uint64_t bytes);

struct WorkloadSpec {
    bool sequential = false;
    unsigned read_percent = 100;
    BlockSizes sizes{{4096}};
    unsigned segments = 1;           // per request, at most
    uint64_t region_offset = 0;
    uint64_t region_size = 0;
    uint64_t seed = 1;
};

// How a request of @len bytes is cut into at most @segments pieces: in
// whole 4 KiB pages where that makes enough pieces (QEMU bounces buffers
// that are not aligned to its memory alignment), else in sectors.
struct SegmentSplit {
    uint32_t count;
    uint32_t granule;
    uint32_t units;     // granules in the request

    uint32_t length(uint32_t index) const
    {
        return (units / count + (index < units % count ? 1 : 0)) * granule;
    }
};
SegmentSplit split_request(uint32_t len, unsigned segments);
// The lengths of all pieces of split_request().
std::vector<uint32_t> split_segments(uint32_t len, unsigned segments);

class Workload {
public:
    explicit Workload(const WorkloadSpec& spec);
    Request next();
    // Read the whole region front to back in @chunk pieces from now on;
    // has_more() turns false at its end.
    void start_sweep(uint32_t chunk);
    bool has_more() const { return !sweeping_ || sweep_pos_ < spec_.region_size; }

private:
    uint32_t pick_size();

    WorkloadSpec spec_;
    std::mt19937_64 rng_;
    uint64_t seq_pos_ = 0;
    bool sweeping_ = false;
    uint32_t sweep_chunk_ = 0;
    uint64_t sweep_pos_ = 0;
};

} // namespace vblk
