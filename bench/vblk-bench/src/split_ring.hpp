// The driver's side of a split virtqueue (virtio 1.x, 2.7) in memory
// shared with the device: descriptor table, available ring, used ring,
// with or without VIRTIO_RING_F_EVENT_IDX.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>

namespace vblk {

static_assert(std::endian::native == std::endian::little,
              "the rings are little-endian and so must be the host");

struct VringDesc {
    uint64_t addr;
    uint32_t len;
    uint16_t flags;
    uint16_t next;
};
static_assert(sizeof(VringDesc) == 16);

struct UsedElem {
    uint32_t id;
    uint32_t len;
};
static_assert(sizeof(UsedElem) == 8);

constexpr uint16_t kDescNext = 1;
constexpr uint16_t kDescWrite = 2;
constexpr uint16_t kDescIndirect = 4;
constexpr uint16_t kAvailNoInterrupt = 1;
constexpr uint16_t kUsedNoNotify = 1;

constexpr uint64_t desc_table_bytes(unsigned size) { return 16ull * size; }
// flags, idx, ring[size], used_event
constexpr uint64_t avail_ring_bytes(unsigned size) { return 6ull + 2ull * size; }
// flags, idx, ring[size], avail_event
constexpr uint64_t used_ring_bytes(unsigned size) { return 6ull + 8ull * size; }

// True when moving an index from @old_idx to @new_idx passes @event
// (the other side asked to hear about the entry at @event).
constexpr bool vring_need_event(uint16_t event, uint16_t new_idx,
                                uint16_t old_idx)
{
    return static_cast<uint16_t>(new_idx - event - 1) <
           static_cast<uint16_t>(new_idx - old_idx);
}

class SplitRing {
public:
    SplitRing() = default;
    // @size is the number of entries (any value up to 32768, as for the
    // device); the memory must stay mapped for the ring's lifetime.
    SplitRing(void* desc, void* avail, void* used, unsigned size, bool event_idx);

    unsigned size() const { return size_; }
    VringDesc& desc(unsigned index) { return desc_[index]; }

    // Puts @head in the next slot of the available ring, unpublished.
    void add(uint16_t head);
    // Makes the added heads visible to the device.  Returns true when
    // the device asked to be notified about them.
    bool publish();
    // Takes up to out.size() new used entries; returns how many.
    // Throws BenchError if the device's used index moved implausibly.
    size_t reap(std::span<UsedElem> out);
    // Asks the device never to interrupt: completions are polled.
    void suppress_interrupts();

    uint16_t added() const { return avail_idx_; }
    uint16_t published() const { return published_; }
    uint16_t last_used() const { return last_used_; }

private:
    uint16_t* avail_word(size_t index) const;
    uint16_t* used_word(size_t index) const;

    VringDesc* desc_ = nullptr;
    uint8_t* avail_ = nullptr;
    uint8_t* used_ = nullptr;
    unsigned size_ = 0;
    bool event_idx_ = false;
    uint16_t avail_idx_ = 0;     // next available slot to fill
    uint16_t published_ = 0;     // what the device has been shown
    uint16_t last_used_ = 0;     // used entries consumed
};

} // namespace vblk
