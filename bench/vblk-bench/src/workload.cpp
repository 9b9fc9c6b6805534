#include "workload.hpp"

#include <algorithm>
#include <charconv>
#include <sstream>

namespace vblk {

namespace {

constexpr uint32_t kSector = 512;

bool valid_block(uint64_t bytes)
{
    return bytes && bytes % kSector == 0 && bytes <= (1ull << 31);
}

// The largest power of two dividing @len: offsets are aligned to it, as
// fio aligns them to the block size.
uint64_t natural_alignment(uint64_t len)
{
    return len & -len;
}

} // namespace

std::optional<uint64_t> parse_size(const std::string& text)
{
    uint64_t value = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || end == text.data()) {
        return std::nullopt;
    }
    std::string unit(end, text.data() + text.size());
    std::transform(unit.begin(), unit.end(), unit.begin(), ::tolower);
    static const std::pair<const char*, unsigned> shifts[] = {
        {"", 0}, {"b", 0}, {"k", 10}, {"kb", 10}, {"kib", 10}, {"m", 20},
        {"mb", 20}, {"mib", 20}, {"g", 30}, {"gb", 30}, {"gib", 30},
        {"t", 40}, {"tib", 40},
    };
    for (auto [name, shift] : shifts) {
        if (unit == name) {
            if (shift && value > (UINT64_MAX >> shift)) {
                return std::nullopt;
            }
            return value << shift;
        }
    }
    return std::nullopt;
}

std::optional<BlockSizes> parse_block_sizes(const std::string& text)
{
    BlockSizes sizes;
    if (auto dash = text.find('-'); dash != std::string::npos) {
        auto low = parse_size(text.substr(0, dash));
        auto high = parse_size(text.substr(dash + 1));
        if (!low || !high || !valid_block(*low) || !valid_block(*high) ||
            *low > *high) {
            return std::nullopt;
        }
        sizes.range_min = static_cast<uint32_t>(*low);
        sizes.range_max = static_cast<uint32_t>(*high);
        return sizes;
    }
    std::istringstream items(text);
    std::string item;
    while (std::getline(items, item, ',')) {
        auto size = parse_size(item);
        if (!size || !valid_block(*size)) {
            return std::nullopt;
        }
        sizes.choices.push_back(static_cast<uint32_t>(*size));
    }
    if (sizes.choices.empty()) {
        return std::nullopt;
    }
    return sizes;
}

std::string format_size(uint64_t bytes)
{
    static const char* units[] = {"", "k", "m", "g", "t"};
    unsigned unit = 0;
    while (bytes && bytes % 1024 == 0 && unit < 4) {
        bytes /= 1024;
        unit++;
    }
    return std::to_string(bytes) + units[unit];
}

uint32_t BlockSizes::largest() const
{
    return choices.empty() ? range_max
                           : *std::max_element(choices.begin(), choices.end());
}

uint32_t BlockSizes::smallest() const
{
    return choices.empty() ? range_min
                           : *std::min_element(choices.begin(), choices.end());
}

std::string BlockSizes::describe() const
{
    if (choices.empty()) {
        return format_size(range_min) + "-" + format_size(range_max);
    }
    std::string text;
    for (uint32_t size : choices) {
        text += (text.empty() ? "" : ",") + format_size(size);
    }
    return text;
}

SegmentSplit split_request(uint32_t len, unsigned segments)
{
    constexpr uint32_t kPage = 4096;
    uint32_t granule = len % kPage == 0 && len / kPage >= segments ? kPage : kSector;
    uint32_t units = len / granule;
    return {std::clamp<uint32_t>(segments, 1, std::max(units, 1u)), granule, units};
}

std::vector<uint32_t> split_segments(uint32_t len, unsigned segments)
{
    SegmentSplit split = split_request(len, segments);
    std::vector<uint32_t> pieces;
    for (uint32_t i = 0; i < split.count; i++) {
        pieces.push_back(split.length(i));
    }
    return pieces;
}

Workload::Workload(const WorkloadSpec& spec) : spec_(spec), rng_(spec.seed)
{
}

uint32_t Workload::pick_size()
{
    const BlockSizes& sizes = spec_.sizes;
    if (!sizes.choices.empty()) {
        if (sizes.choices.size() == 1) {
            return sizes.choices[0];
        }
        std::uniform_int_distribution<size_t> pick(0, sizes.choices.size() - 1);
        return sizes.choices[pick(rng_)];
    }
    // Multiples of the smallest size, as fio's bsrange.
    std::uniform_int_distribution<uint32_t> pick(1, sizes.range_max / sizes.range_min);
    return pick(rng_) * sizes.range_min;
}

Request Workload::next()
{
    if (sweeping_) {
        uint32_t len = static_cast<uint32_t>(
            std::min<uint64_t>(sweep_chunk_, spec_.region_size - sweep_pos_));
        Request request{Op::read, spec_.region_offset + sweep_pos_, len,
                        spec_.segments};
        sweep_pos_ += len;
        return request;
    }
    Request request{};
    std::uniform_int_distribution<unsigned> percent(0, 99);
    request.op = percent(rng_) < spec_.read_percent ? Op::read : Op::write;
    request.len = static_cast<uint32_t>(
        std::min<uint64_t>(pick_size(), spec_.region_size));
    request.segments = spec_.segments;
    if (spec_.sequential) {
        if (seq_pos_ + request.len > spec_.region_size) {
            seq_pos_ = 0;
        }
        request.offset = spec_.region_offset + seq_pos_;
        seq_pos_ += request.len;
    } else {
        uint64_t align = natural_alignment(request.len);
        uint64_t slots = (spec_.region_size - request.len) / align + 1;
        std::uniform_int_distribution<uint64_t> slot(0, slots - 1);
        request.offset = spec_.region_offset + slot(rng_) * align;
    }
    return request;
}

void Workload::start_sweep(uint32_t chunk)
{
    sweeping_ = true;
    sweep_chunk_ = chunk;
    sweep_pos_ = 0;
}

} // namespace vblk
