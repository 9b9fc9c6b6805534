// Sizes, request generation, verification and the command line.
#include "error.hpp"
#include "options.hpp"
#include "verify.hpp"
#include "workload.hpp"

#include <gtest/gtest.h>

#include <numeric>
#include <set>
#include <vector>

using namespace vblk;

TEST(Sizes, ParseUnits)
{
    EXPECT_EQ(parse_size("512"), 512u);
    EXPECT_EQ(parse_size("4k"), 4096u);
    EXPECT_EQ(parse_size("4K"), 4096u);
    EXPECT_EQ(parse_size("8M"), 8u << 20);
    EXPECT_EQ(parse_size("2GiB"), 2ull << 30);
    EXPECT_FALSE(parse_size("4x"));
    EXPECT_FALSE(parse_size("k"));
    EXPECT_FALSE(parse_size(""));
    EXPECT_EQ(format_size(4096), "4k");
    EXPECT_EQ(format_size(8u << 20), "8m");
    EXPECT_EQ(format_size(1536), "1536");
}

TEST(Sizes, BlockSizeListsAndRanges)
{
    auto list = parse_block_sizes("512,4k,8m");
    ASSERT_TRUE(list);
    EXPECT_EQ(list->choices, (std::vector<uint32_t>{512, 4096, 8u << 20}));
    EXPECT_EQ(list->largest(), 8u << 20);
    EXPECT_EQ(list->describe(), "512,4k,8m");
    auto range = parse_block_sizes("512-64k");
    ASSERT_TRUE(range);
    EXPECT_EQ(range->smallest(), 512u);
    EXPECT_EQ(range->largest(), 65536u);
    EXPECT_FALSE(parse_block_sizes("1000"));      // not a multiple of 512
    EXPECT_FALSE(parse_block_sizes("64k-4k"));
    EXPECT_FALSE(parse_block_sizes("4k,,"));
    EXPECT_FALSE(parse_block_sizes("0"));
}

TEST(Segments, SplitIntoSectorMultiplesThatAddUp)
{
    EXPECT_EQ(split_segments(4096, 1), (std::vector<uint32_t>{4096}));
    EXPECT_EQ(split_segments(4096, 4), (std::vector<uint32_t>(4, 1024)));
    EXPECT_EQ(split_segments(1536, 2), (std::vector<uint32_t>{1024, 512}));
    EXPECT_EQ(split_segments(512, 8), (std::vector<uint32_t>{512}));
    // Whole pages when there are enough of them
    EXPECT_EQ(split_segments(5 * 4096, 2), (std::vector<uint32_t>{12288, 8192}));
    auto pieces = split_segments(8u << 20, 100);
    EXPECT_EQ(pieces.size(), 100u);
    EXPECT_EQ(std::accumulate(pieces.begin(), pieces.end(), 0ull), 8ull << 20);
    for (uint32_t piece : pieces) {
        EXPECT_EQ(piece % 4096, 0u);
    }
}

TEST(Workload, RandomOffsetsAreAlignedAndInside)
{
    WorkloadSpec spec;
    spec.sizes = *parse_block_sizes("4k,128k");
    spec.region_offset = 1 << 20;
    spec.region_size = 64 << 20;
    spec.read_percent = 70;
    Workload workload(spec);
    std::set<uint64_t> offsets;
    int reads = 0;
    for (int i = 0; i < 20000; i++) {
        Request r = workload.next();
        ASSERT_EQ(r.offset % r.len, 0u);
        ASSERT_GE(r.offset, spec.region_offset);
        ASSERT_LE(r.offset + r.len, spec.region_offset + spec.region_size);
        offsets.insert(r.offset);
        reads += r.op == Op::read;
    }
    EXPECT_GT(offsets.size(), 5000u);
    EXPECT_NEAR(reads / 20000.0, 0.7, 0.03);
}

TEST(Workload, RangeSizesStayInRange)
{
    WorkloadSpec spec;
    spec.sizes = *parse_block_sizes("512-1m");
    spec.region_size = 16 << 20;
    Workload workload(spec);
    std::set<uint32_t> sizes;
    for (int i = 0; i < 5000; i++) {
        Request r = workload.next();
        ASSERT_EQ(r.len % 512, 0u);
        ASSERT_GE(r.len, 512u);
        ASSERT_LE(r.len, 1u << 20);
        sizes.insert(r.len);
    }
    EXPECT_GT(sizes.size(), 1000u);
    WorkloadSpec pages = spec;
    pages.sizes = *parse_block_sizes("4k-1m");
    Workload in_pages(pages);
    for (int i = 0; i < 1000; i++) {
        ASSERT_EQ(in_pages.next().len % 4096, 0u);
    }
}

TEST(Workload, SequentialWrapsAtTheEnd)
{
    WorkloadSpec spec;
    spec.sequential = true;
    spec.read_percent = 0;
    spec.sizes = *parse_block_sizes("64k");
    spec.region_size = 256 << 10;
    Workload workload(spec);
    std::vector<uint64_t> offsets;
    for (int i = 0; i < 6; i++) {
        Request r = workload.next();
        EXPECT_EQ(r.op, Op::write);
        offsets.push_back(r.offset);
    }
    EXPECT_EQ(offsets, (std::vector<uint64_t>{0, 65536, 131072, 196608, 0, 65536}));
}

TEST(Workload, SweepReadsTheRegionOnce)
{
    WorkloadSpec spec;
    spec.region_offset = 4096;
    spec.region_size = 100 * 1024;
    Workload workload(spec);
    workload.start_sweep(32 * 1024);
    uint64_t expect = spec.region_offset;
    int requests = 0;
    while (workload.has_more()) {
        Request r = workload.next();
        EXPECT_EQ(r.op, Op::read);
        EXPECT_EQ(r.offset, expect);
        expect += r.len;
        requests++;
    }
    EXPECT_EQ(requests, 4);
    EXPECT_EQ(expect, spec.region_offset + spec.region_size);
}

TEST(Verify, PatternDependsOnPlaceAndGeneration)
{
    EXPECT_NE(pattern_word(0, 1), pattern_word(8, 1));
    EXPECT_NE(pattern_word(0, 1), pattern_word(0, 2));
    EXPECT_NE(pattern_word(512, 1), pattern_word(0, 1));
}

TEST(Verify, AcceptsWhatWasWrittenAndFindsACorruptByte)
{
    VerifyTracker tracker(0, 1 << 20);
    std::vector<uint8_t> buf(8192);
    uint32_t gen = tracker.fill(buf.data(), 4096, 8192);
    tracker.written(4096, 8192, gen);
    EXPECT_FALSE(tracker.check(buf.data(), 4096, 8192));
    EXPECT_EQ(tracker.bytes_checked(), 8192u);
    buf[5000] ^= 1;
    auto bad = tracker.check(buf.data(), 4096, 8192);
    ASSERT_TRUE(bad);
    EXPECT_NE(bad->find("disk offset 9096"), std::string::npos) << *bad;
    // Data from another place (a misdirected read) is caught too.
    std::vector<uint8_t> other(4096);
    gen = tracker.fill(other.data(), 0, 4096);
    tracker.written(0, 4096, gen);
    EXPECT_TRUE(tracker.check(other.data(), 4096, 4096));
}

TEST(Verify, UnwrittenSectorsAreNotChecked)
{
    VerifyTracker tracker(0, 1 << 20);
    std::vector<uint8_t> junk(4096, 0xa5);
    EXPECT_FALSE(tracker.check(junk.data(), 0, 4096));
    EXPECT_EQ(tracker.bytes_checked(), 0u);
}

TEST(Verify, RequestsInFlightMayNotOverlap)
{
    VerifyTracker tracker(1 << 20, 1 << 20);
    tracker.start((1 << 20) + 4096, 8192);
    EXPECT_FALSE(tracker.can_start((1 << 20) + 8192, 512));
    EXPECT_FALSE(tracker.can_start(1 << 20, 4608));
    EXPECT_TRUE(tracker.can_start(1 << 20, 4096));
    EXPECT_TRUE(tracker.can_start((1 << 20) + 12288, 4096));
    tracker.finish((1 << 20) + 4096, 8192);
    EXPECT_TRUE(tracker.can_start((1 << 20) + 8192, 512));
}

namespace {

Options parse(std::vector<const char*> args)
{
    args.insert(args.begin(), "vblk-bench");
    Options options;
    std::string help;
    parse_options(static_cast<int>(args.size()), args.data(), options, help);
    return options;
}

} // namespace

TEST(Options, DefaultsAndValues)
{
    Options o = parse({"--qemu", "/q", "--target=/dev/loop0", "--rw", "randrw",
                       "--bs", "4k,8m", "--queues", "16", "--depth", "128",
                       "--fixed-buffers", "on", "--wrapper", "env LD_PRELOAD=x.so",
                       "--qemu-arg", "-trace", "--qemu-arg", "uring_*"});
    EXPECT_EQ(o.target, "/dev/loop0");
    EXPECT_EQ(o.workload.read_percent, 50u);
    EXPECT_FALSE(o.workload.sequential);
    EXPECT_EQ(o.workload.sizes.largest(), 8u << 20);
    EXPECT_EQ(o.queues, 16u);
    EXPECT_TRUE(o.query_fixed);
    EXPECT_EQ(o.wrapper, (std::vector<std::string>{"env", "LD_PRELOAD=x.so"}));
    EXPECT_EQ(o.qemu_args, (std::vector<std::string>{"-trace", "uring_*"}));
}

TEST(Options, RejectsNonsenseWithAMessage)
{
    EXPECT_THROW(parse({"--target", "/t"}), BenchError);   // no --qemu
    EXPECT_THROW(parse({"--qemu", "/q", "--target", "/t", "--queues", "1025"}), BenchError);
    EXPECT_THROW(parse({"--qemu", "/q", "--target", "/t", "--queue-size", "65536"}), BenchError);
    EXPECT_THROW(parse({"--qemu", "/q", "--target", "/t", "--bs", "3"}), BenchError);
    EXPECT_THROW(parse({"--qemu", "/q", "--target", "/t", "--rw", "sideways"}), BenchError);
    EXPECT_THROW(parse({"--qemu", "/q", "--target", "/t", "--depth", "300"}), BenchError);
    EXPECT_THROW(parse({"--qemu", "/q", "--target", "/t", "--bogus"}), BenchError);
    EXPECT_THROW(parse({"--qemu", "/q", "--target", "/t", "--verify",
                        "--buffer-pool", "1m"}), BenchError);
    // The limits the device may refuse are left to the device.
    Options big = parse({"--qemu", "/q", "--target", "/t", "--queues", "1024",
                         "--queue-size", "32768"});
    EXPECT_EQ(big.queue_size, 32768u);
}

TEST(Options, VhostUserBlkLeavesTheDiskToTheBackend)
{
    Options o = parse({"--qemu", "/q", "--vhost-user-blk", "/run/vu.sock"});
    EXPECT_EQ(o.vhost_user_blk, "/run/vu.sock");
    EXPECT_FALSE(o.iothread);                               // QEMU serves nothing
    EXPECT_THROW(parse({"--qemu", "/q"}), BenchError);      // neither
    for (const char* opt : {"--fixed-buffers=on", "--blockdev=driver=null-co",
                            "--blockdev-opts=aio-max-in-flight=0", "--iothread-cpu=1"}) {
        EXPECT_THROW(parse({"--qemu", "/q", "--vhost-user-blk", "/s", opt}), BenchError) << opt;
    }
}
