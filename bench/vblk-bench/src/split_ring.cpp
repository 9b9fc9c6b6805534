#include "split_ring.hpp"

#include "error.hpp"

#include <atomic>
#include <string>

namespace vblk {

namespace {

uint16_t load_acquire(uint16_t* word)
{
    return std::atomic_ref<uint16_t>(*word).load(std::memory_order_acquire);
}

void store_release(uint16_t* word, uint16_t value)
{
    std::atomic_ref<uint16_t>(*word).store(value, std::memory_order_release);
}

} // namespace

SplitRing::SplitRing(void* desc, void* avail, void* used, unsigned size,
                     bool event_idx)
    : desc_(static_cast<VringDesc*>(desc)), avail_(static_cast<uint8_t*>(avail)),
      used_(static_cast<uint8_t*>(used)), size_(size), event_idx_(event_idx)
{
}

// 16-bit words of the rings: [0] flags, [1] idx, [2 + i] ring entries,
// and the event index after the ring.
uint16_t* SplitRing::avail_word(size_t index) const
{
    return reinterpret_cast<uint16_t*>(avail_) + index;
}

uint16_t* SplitRing::used_word(size_t index) const
{
    return reinterpret_cast<uint16_t*>(used_) + index;
}

void SplitRing::add(uint16_t head)
{
    *avail_word(2 + avail_idx_ % size_) = head;
    avail_idx_++;
}

bool SplitRing::publish()
{
    uint16_t old_idx = published_;
    uint16_t new_idx = avail_idx_;
    if (old_idx == new_idx) {
        return false;
    }
    store_release(avail_word(1), new_idx);
    published_ = new_idx;
    // The index must be visible before we read whether the device wants
    // a notification, or we could both decide the other will act.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (event_idx_) {
        // avail_event sits after the used ring's entries (8 bytes = 4 words each)
        uint16_t avail_event = load_acquire(used_word(2 + 4 * size_));
        return vring_need_event(avail_event, new_idx, old_idx);
    }
    return !(load_acquire(used_word(0)) & kUsedNoNotify);
}

size_t SplitRing::reap(std::span<UsedElem> out)
{
    uint16_t used_idx = load_acquire(used_word(1));
    uint16_t fresh = used_idx - last_used_;
    uint16_t outstanding = published_ - last_used_;
    if (fresh > outstanding) {
        throw BenchError("device moved the used index to " +
                         std::to_string(used_idx) + " with only " +
                         std::to_string(outstanding) + " requests outstanding");
    }
    size_t taken = std::min<size_t>(fresh, out.size());
    auto* ring = reinterpret_cast<UsedElem*>(used_ + 4);
    for (size_t i = 0; i < taken; i++) {
        out[i] = ring[static_cast<uint16_t>(last_used_ + i) % size_];
    }
    last_used_ += static_cast<uint16_t>(taken);
    return taken;
}

void SplitRing::suppress_interrupts()
{
    if (event_idx_) {
        // Behind what we consumed: the device only passes it after
        // 65536 more completions, never with at most 32768 outstanding.
        store_release(avail_word(2 + size_), last_used_ - 1);
    } else {
        store_release(avail_word(0), kAvailNoInterrupt);
    }
}

} // namespace vblk
