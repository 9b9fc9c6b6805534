#include "stats.hpp"

#include <gtest/gtest.h>

#include <random>

using namespace vblk;

TEST(Histogram, SmallValuesAreExact)
{
    LatencyHistogram h;
    for (uint64_t v = 1; v <= 50; v++) {
        h.add(v);
    }
    EXPECT_EQ(h.percentile(50), 25u);
    EXPECT_EQ(h.percentile(100), 50u);
    EXPECT_EQ(h.min(), 1u);
    EXPECT_DOUBLE_EQ(h.mean(), 25.5);
}

TEST(Histogram, BucketsCoverEveryValueInOrder)
{
    unsigned last = 0;
    for (uint64_t v : {0ull, 1ull, 63ull, 64ull, 65ull, 127ull, 128ull, 1000ull,
                       123456789ull, 1ull << 40, ~0ull}) {
        unsigned b = LatencyHistogram::bucket_of(v);
        EXPECT_GE(b, last);
        last = b;
        EXPECT_GE(LatencyHistogram::bucket_upper(b), v);
    }
}

TEST(Histogram, PercentilesWithinTheRelativeError)
{
    LatencyHistogram h;
    std::mt19937_64 rng(7);
    std::vector<uint64_t> values;
    std::lognormal_distribution<double> dist(10, 1.5);
    for (int i = 0; i < 100000; i++) {
        uint64_t v = static_cast<uint64_t>(dist(rng)) + 1;
        values.push_back(v);
        h.add(v);
    }
    std::sort(values.begin(), values.end());
    for (double p : {50.0, 90.0, 99.0, 99.9}) {
        uint64_t exact = values[static_cast<size_t>(std::ceil(p / 100 * values.size())) - 1];
        double got = static_cast<double>(h.percentile(p));
        EXPECT_NEAR(got, static_cast<double>(exact), exact / 64.0 + 1) << "p" << p;
    }
    EXPECT_EQ(h.percentile(100), values.back());
}

TEST(Histogram, MergeAddsCounts)
{
    LatencyHistogram a, b;
    a.add(10);
    b.add(1000);
    b.add(2000);
    a.merge(b);
    EXPECT_EQ(a.count(), 3u);
    EXPECT_EQ(a.max(), 2000u);
    EXPECT_EQ(a.min(), 10u);
}
