#include "stats.hpp"

#include <algorithm>
#include <bit>
#include <cmath>

namespace vblk {

namespace {
constexpr unsigned kBuckets = (64 - LatencyHistogram::kSubBits + 1)
                              << LatencyHistogram::kSubBits;
}

LatencyHistogram::LatencyHistogram() : buckets_(kBuckets) {}

unsigned LatencyHistogram::bucket_of(uint64_t ns)
{
    if (ns < (1ull << kSubBits)) {
        return static_cast<unsigned>(ns);
    }
    unsigned top = 63 - static_cast<unsigned>(std::countl_zero(ns));
    unsigned shift = top - kSubBits;
    // The leading bit is implied: the next kSubBits bits pick the bucket.
    unsigned sub = static_cast<unsigned>(ns >> shift) & ((1u << kSubBits) - 1);
    return ((shift + 1) << kSubBits) + sub;
}

uint64_t LatencyHistogram::bucket_upper(unsigned bucket)
{
    if (bucket < (1u << kSubBits)) {
        return bucket;
    }
    unsigned shift = (bucket >> kSubBits) - 1;
    uint64_t sub = bucket & ((1u << kSubBits) - 1);
    uint64_t low = ((1ull << kSubBits) | sub) << shift;
    return low + ((1ull << shift) - 1);
}

void LatencyHistogram::add(uint64_t ns)
{
    buckets_[bucket_of(ns)]++;
    count_++;
    max_ = std::max(max_, ns);
    min_ = std::min(min_, ns);
    sum_ += ns;
}

void LatencyHistogram::merge(const LatencyHistogram& other)
{
    for (size_t i = 0; i < buckets_.size(); i++) {
        buckets_[i] += other.buckets_[i];
    }
    count_ += other.count_;
    max_ = std::max(max_, other.max_);
    min_ = std::min(min_, other.min_);
    sum_ += other.sum_;
}

double LatencyHistogram::mean() const
{
    return count_ ? static_cast<double>(sum_ / count_) : 0.0;
}

uint64_t LatencyHistogram::percentile(double percent) const
{
    if (!count_) {
        return 0;
    }
    auto rank = static_cast<uint64_t>(std::ceil(percent / 100.0 * count_));
    rank = std::clamp<uint64_t>(rank, 1, count_);
    uint64_t seen = 0;
    for (unsigned bucket = 0; bucket < buckets_.size(); bucket++) {
        seen += buckets_[bucket];
        if (seen >= rank) {
            return std::min(bucket_upper(bucket), max_);
        }
    }
    return max_;
}

} // namespace vblk
