// The driver's split ring against a device model written from the
// virtio 1.x specification (2.7), over plain memory.
#include "error.hpp"
#include "split_ring.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

using namespace vblk;

namespace {

// The device's view: consumes available heads, returns used entries.
struct FakeDevice {
    std::vector<VringDesc> desc;
    std::vector<uint16_t> avail;    // flags, idx, ring[n], used_event
    std::vector<uint16_t> used;     // flags, idx, ring[n] (4 words each), avail_event
    unsigned size;
    uint16_t last_avail = 0;
    uint16_t used_idx = 0;
    uint16_t signalled = 0;         // used index at the last interrupt check

    explicit FakeDevice(unsigned n)
        : desc(n), avail(3 + n), used(3 + 4 * n), size(n)
    {
    }

    SplitRing ring(bool event_idx)
    {
        return SplitRing(desc.data(), avail.data(), used.data(), size, event_idx);
    }

    uint16_t avail_idx() const { return avail[1]; }
    uint16_t used_event() const { return avail[2 + size]; }
    void set_avail_event(uint16_t value) { used[2 + 4 * size] = value; }

    // Takes every available head, returns how many.
    std::vector<uint16_t> take()
    {
        std::vector<uint16_t> heads;
        while (last_avail != avail_idx()) {
            heads.push_back(avail[2 + last_avail % size]);
            last_avail++;
        }
        return heads;
    }

    void complete(uint16_t head, uint32_t len)
    {
        UsedElem elem{head, len};
        std::memcpy(&used[2 + 4 * (used_idx % size)], &elem, sizeof(elem));
        used_idx++;
        used[1] = used_idx;
    }

    // Would the device interrupt now (EVENT_IDX rule)?
    bool interrupt_needed()
    {
        bool need = vring_need_event(used_event(), used_idx, signalled);
        signalled = used_idx;
        return need;
    }
};

} // namespace

TEST(NeedEvent, FollowsTheSpecification)
{
    EXPECT_TRUE(vring_need_event(0, 1, 0));      // passed entry 0
    EXPECT_FALSE(vring_need_event(1, 1, 0));     // not yet at entry 1
    EXPECT_TRUE(vring_need_event(5, 10, 0));
    EXPECT_FALSE(vring_need_event(10, 10, 0));
    EXPECT_FALSE(vring_need_event(3, 10, 5));    // already passed before
    EXPECT_TRUE(vring_need_event(65535, 2, 65534));   // across the wrap
    EXPECT_FALSE(vring_need_event(3, 2, 65534));
}

TEST(SplitRing, PublishesAddedHeadsInOrder)
{
    FakeDevice device(8);
    SplitRing ring = device.ring(true);
    ring.add(3);
    ring.add(5);
    EXPECT_EQ(device.avail_idx(), 0) << "nothing is visible before publish";
    ring.publish();
    EXPECT_EQ(device.take(), (std::vector<uint16_t>{3, 5}));
    EXPECT_FALSE(ring.publish()) << "nothing new: no notification";
}

TEST(SplitRing, NotifiesOnlyWhenTheDeviceAskedWithEventIdx)
{
    FakeDevice device(8);
    SplitRing ring = device.ring(true);
    device.set_avail_event(0);                // wants to hear of entry 0
    ring.add(0);
    EXPECT_TRUE(ring.publish());
    device.take();
    // A polling device leaves avail_event behind: no doorbells.
    for (uint16_t head = 1; head < 6; head++) {
        ring.add(head);
        EXPECT_FALSE(ring.publish());
    }
    device.take();
    device.set_avail_event(7);                // about to sleep: asks for entry 7
    ring.add(6);
    EXPECT_FALSE(ring.publish());
    ring.add(7);
    EXPECT_TRUE(ring.publish());
}

TEST(SplitRing, NotifiesUnlessNoNotifyWithoutEventIdx)
{
    FakeDevice device(4);
    SplitRing ring = device.ring(false);
    ring.add(0);
    EXPECT_TRUE(ring.publish());
    device.used[0] = kUsedNoNotify;
    ring.add(1);
    EXPECT_FALSE(ring.publish());
    ring.suppress_interrupts();
    EXPECT_EQ(device.avail[0], kAvailNoInterrupt);
}

TEST(SplitRing, ReapsAcrossTheIndexWrapAndNeverAsksForInterrupts)
{
    FakeDevice device(8);
    SplitRing ring = device.ring(true);
    ring.suppress_interrupts();
    std::vector<UsedElem> out(8);
    uint32_t next_len = 0;
    // 70000 requests: both 16-bit indexes wrap, ring slots wrap often.
    for (int round = 0; round < 70000 / 5; round++) {
        for (uint16_t head = 0; head < 5; head++) {
            ring.add(head);
        }
        ring.publish();
        auto heads = device.take();
        ASSERT_EQ(heads.size(), 5u);
        for (auto it = heads.rbegin(); it != heads.rend(); ++it) {
            device.complete(*it, next_len++);   // out of order
        }
        ASSERT_FALSE(device.interrupt_needed()) << "round " << round;
        size_t got = ring.reap(out);
        ASSERT_EQ(got, 5u);
        for (size_t i = 0; i < got; i++) {
            EXPECT_EQ(out[i].id, 4 - i);
            EXPECT_EQ(out[i].len, next_len - 5 + i);
        }
        ring.suppress_interrupts();
    }
    EXPECT_EQ(ring.last_used(), static_cast<uint16_t>(70000));
}

TEST(SplitRing, ReapTakesNoMoreThanAsked)
{
    FakeDevice device(8);
    SplitRing ring = device.ring(true);
    for (uint16_t head = 0; head < 4; head++) {
        ring.add(head);
    }
    ring.publish();
    for (uint16_t head : device.take()) {
        device.complete(head, 1);
    }
    std::vector<UsedElem> out(3);
    EXPECT_EQ(ring.reap(out), 3u);
    EXPECT_EQ(ring.reap(out), 1u);
    EXPECT_EQ(ring.reap(out), 0u);
}

TEST(SplitRing, RejectsAUsedIndexBeyondWhatIsOutstanding)
{
    FakeDevice device(8);
    SplitRing ring = device.ring(true);
    ring.add(0);
    ring.publish();
    device.used[1] = 2;     // two completions for one request
    std::vector<UsedElem> out(8);
    EXPECT_THROW(ring.reap(out), BenchError);
}

TEST(SplitRing, LayoutSizesMatchTheSpecification)
{
    EXPECT_EQ(desc_table_bytes(256), 4096u);
    EXPECT_EQ(avail_ring_bytes(256), 6u + 512u);
    EXPECT_EQ(used_ring_bytes(256), 6u + 2048u);
    EXPECT_EQ(used_ring_bytes(32768), 6u + 262144u);
}
