// Capability discovery on a fake configuration space; the q35 RAM map.
#include "guest_memory.hpp"
#include "virtio_pci.hpp"

#include <gtest/gtest.h>

#include <array>
#include <cstring>

using namespace vblk;

namespace {

struct FakeConfig {
    std::array<uint8_t, 256> bytes{};

    void put32(unsigned off, uint32_t v) { std::memcpy(&bytes[off], &v, 4); }
    uint32_t read32(unsigned off) const
    {
        uint32_t v;
        std::memcpy(&v, &bytes[off], 4);
        return v;
    }
    // A virtio_pci_cap at @at linking to @next.
    void cap(unsigned at, unsigned next, uint8_t type, uint8_t bar,
             uint32_t offset, uint32_t length)
    {
        bytes[at] = 0x09;
        bytes[at + 1] = static_cast<uint8_t>(next);
        bytes[at + 2] = type == kCapNotify ? 20 : 16;
        bytes[at + 3] = type;
        bytes[at + 4] = bar;
        put32(at + 8, offset);
        put32(at + 12, length);
    }
};

} // namespace

TEST(VirtioCaps, FindsEachStructureAndSkipsOtherCapabilities)
{
    FakeConfig cfg;
    cfg.put32(0x04, 0x0010u << 16);       // status: capability list
    cfg.bytes[0x34] = 0x40;
    cfg.bytes[0x40] = 0x11;               // MSI-X, not ours
    cfg.bytes[0x41] = 0x50;
    cfg.cap(0x50, 0x64, kCapCommon, 4, 0x0000, 0x1000);
    cfg.cap(0x64, 0x78, kCapNotify, 4, 0x3000, 0x1000);
    cfg.put32(0x64 + 16, 4);              // notify_off_multiplier
    cfg.cap(0x78, 0x88, kCapIsr, 4, 0x1000, 0x1000);
    cfg.cap(0x88, 0x00, kCapDevice, 4, 0x2000, 0x1000);
    auto caps = find_virtio_caps([&](unsigned off) { return cfg.read32(off); });
    ASSERT_EQ(caps.size(), 4u);
    EXPECT_EQ(caps[0].type, kCapCommon);
    EXPECT_EQ(caps[1].type, kCapNotify);
    EXPECT_EQ(caps[1].offset, 0x3000u);
    EXPECT_EQ(caps[1].notify_multiplier, 4u);
    EXPECT_EQ(caps[3].type, kCapDevice);
    EXPECT_EQ(caps[3].bar, 4);
}

TEST(VirtioCaps, NoListAndLoopingListsEnd)
{
    FakeConfig none;
    EXPECT_TRUE(find_virtio_caps([&](unsigned off) { return none.read32(off); }).empty());
    FakeConfig loop;
    loop.put32(0x04, 0x0010u << 16);
    loop.bytes[0x34] = 0x40;
    loop.cap(0x40, 0x40, kCapCommon, 4, 0, 0x1000);   // points at itself
    auto caps = find_virtio_caps([&](unsigned off) { return loop.read32(off); });
    EXPECT_LE(caps.size(), 48u);
}

TEST(VirtioFeatures, Names)
{
    EXPECT_EQ(virtio_feature_name(29), "RING_F_EVENT_IDX");
    EXPECT_EQ(virtio_feature_name(50), "bit 50");
    EXPECT_EQ(virtio_feature_names((1ull << 32) | (1ull << 12)), "BLK_F_MQ, F_VERSION_1");
}

TEST(Q35Layout, SmallRamIsIdentityMapped)
{
    Q35Layout layout(1ull << 30);
    EXPECT_EQ(layout.below_4g, 1ull << 30);
    EXPECT_EQ(layout.file_offset(0x100000, 4096), 0x100000u);
    EXPECT_EQ(layout.file_offset((1ull << 30) - 4096, 8192), UINT64_MAX);
    EXPECT_EQ(layout.fit((1ull << 30) - 4096, 8192), UINT64_MAX);
}

TEST(Q35Layout, LargeRamContinuesAbove4G)
{
    Q35Layout layout(6ull << 30);
    EXPECT_EQ(layout.below_4g, 2ull << 30);
    EXPECT_EQ(layout.file_offset(4ull << 30, 4096), 2ull << 30);
    EXPECT_EQ(layout.file_offset((8ull << 30) - 4096, 4096), (6ull << 30) - 4096);
    EXPECT_EQ(layout.file_offset((8ull << 30) - 4096, 8192), UINT64_MAX);
    // An allocation that does not fit below the hole moves above 4 GiB.
    EXPECT_EQ(layout.fit((2ull << 30) - 4096, 8192), 4ull << 30);
    EXPECT_EQ(layout.fit(1ull << 30, 8192), 1ull << 30);
}
