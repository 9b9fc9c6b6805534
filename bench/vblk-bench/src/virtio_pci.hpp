// A virtio device on the modern (virtio 1.x) PCI transport, driven over
// qtest: configuration space through ports 0xcf8/0xcfc, the common,
// notify and device structures through MMIO on the BAR they live in.
#pragma once

#include "qtest.hpp"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace vblk {

// One virtio_pci_cap in configuration space.
struct VirtioPciCap {
    uint8_t type;          // VIRTIO_PCI_CAP_*_CFG
    uint8_t bar;
    uint32_t offset;
    uint32_t length;
    uint32_t notify_multiplier;   // notify structure only
};

constexpr uint8_t kCapCommon = 1;
constexpr uint8_t kCapNotify = 2;
constexpr uint8_t kCapIsr = 3;
constexpr uint8_t kCapDevice = 4;

// The virtio capabilities of a function, read with @read32 (a dword of
// configuration space at a 4-byte aligned offset).
std::vector<VirtioPciCap> find_virtio_caps(
    const std::function<uint32_t(unsigned)>& read32);

// "EVENT_IDX", "VERSION_1", ... or "bit N".
std::string virtio_feature_name(unsigned bit);
// Names of the bits of @features, comma-separated.
std::string virtio_feature_names(uint64_t features);

constexpr unsigned kFeatureIndirectDesc = 28;
constexpr unsigned kFeatureEventIdx = 29;
constexpr unsigned kFeatureVersion1 = 32;
constexpr unsigned kBlkFeatureSegMax = 2;
constexpr unsigned kBlkFeatureBlkSize = 6;
constexpr unsigned kBlkFeatureFlush = 9;
constexpr unsigned kBlkFeatureMq = 12;

constexpr uint8_t kStatusAcknowledge = 1;
constexpr uint8_t kStatusDriver = 2;
constexpr uint8_t kStatusDriverOk = 4;
constexpr uint8_t kStatusFeaturesOk = 8;
constexpr uint8_t kStatusNeedsReset = 0x40;
constexpr uint8_t kStatusFailed = 0x80;

class VirtioPciDevice {
public:
    // The function at bus 0, @devfn; BARs are placed from @mmio_base up.
    VirtioPciDevice(QtestClient& qtest, unsigned devfn, uint64_t mmio_base);

    uint16_t vendor_id() const { return vendor_; }
    uint16_t device_id() const { return device_; }

    void reset();
    uint8_t status();
    void add_status(uint8_t bits);
    uint64_t device_features();
    // Acknowledges the device, offers it @required | (what it has of
    // @optional), and checks that it accepts.  Returns what was agreed.
    // Throws BenchError naming any @required feature it lacks or the
    // refusal of FEATURES_OK.
    uint64_t negotiate(uint64_t required, uint64_t optional);
    unsigned num_queues();
    unsigned queue_max_size(unsigned queue);
    // Sets queue @queue up at these guest addresses and enables it.
    void setup_queue(unsigned queue, unsigned size, uint64_t desc,
                     uint64_t avail, uint64_t used);
    // The guest address the queue's doorbell is written to.
    uint64_t notify_address(unsigned queue);
    void driver_ok();

    uint32_t config_read32(unsigned offset);
    uint64_t config_read64(unsigned offset);
    uint16_t config_read16(unsigned offset);

private:
    uint32_t pci_read32(unsigned offset);
    void pci_write32(unsigned offset, uint32_t value);
    void pci_write16(unsigned offset, uint16_t value);
    uint64_t map_bar(unsigned bar, uint64_t& next_base);
    uint64_t common(unsigned offset) const { return common_ + offset; }

    QtestClient& qtest_;
    unsigned devfn_;
    uint16_t vendor_ = 0;
    uint16_t device_ = 0;
    uint64_t common_ = 0;
    uint64_t notify_ = 0;
    uint32_t notify_multiplier_ = 0;
    uint64_t device_cfg_ = 0;
};

} // namespace vblk
