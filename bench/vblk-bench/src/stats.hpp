// Latency histogram with bounded relative error, and run totals.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace vblk {

// Log-linear buckets: values below 2^kSubBits exactly, above that 2^kSubBits
// buckets per power of two (relative error below 1/64).
class LatencyHistogram {
public:
    static constexpr unsigned kSubBits = 6;

    LatencyHistogram();
    void add(uint64_t ns);
    void merge(const LatencyHistogram& other);
    uint64_t count() const { return count_; }
    uint64_t max() const { return max_; }
    uint64_t min() const { return count_ ? min_ : 0; }
    double mean() const;
    // The value below which @percent of the samples lie (the upper edge
    // of its bucket, never above the largest sample).
    uint64_t percentile(double percent) const;

    static unsigned bucket_of(uint64_t ns);
    static uint64_t bucket_upper(unsigned bucket);

private:
    std::vector<uint64_t> buckets_;
    uint64_t count_ = 0;
    uint64_t max_ = 0;
    uint64_t min_ = UINT64_MAX;
    long double sum_ = 0;
};

struct OpTotals {
    uint64_t ios = 0;
    uint64_t bytes = 0;
    LatencyHistogram latency;
};

} // namespace vblk
