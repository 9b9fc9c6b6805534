#include "virtio_pci.hpp"

#include "error.hpp"

#include <array>
#include <map>

namespace vblk {

namespace {

// Offsets in configuration space and in struct virtio_pci_common_cfg.
constexpr unsigned kPciCommand = 0x04;
constexpr unsigned kPciStatus = 0x06;
constexpr unsigned kPciBar0 = 0x10;
constexpr unsigned kPciCapPointer = 0x34;
constexpr uint16_t kPciStatusCapList = 0x10;
constexpr uint16_t kPciCommandMemory = 0x2;
constexpr uint16_t kPciCommandMaster = 0x4;
constexpr uint8_t kPciCapVendor = 0x09;

constexpr unsigned kCommonDfSelect = 0x00;
constexpr unsigned kCommonDf = 0x04;
constexpr unsigned kCommonGfSelect = 0x08;
constexpr unsigned kCommonGf = 0x0c;
constexpr unsigned kCommonNumQueues = 0x12;
constexpr unsigned kCommonStatus = 0x14;
constexpr unsigned kCommonQSelect = 0x16;
constexpr unsigned kCommonQSize = 0x18;
constexpr unsigned kCommonQEnable = 0x1c;
constexpr unsigned kCommonQNotifyOff = 0x1e;
constexpr unsigned kCommonQDesc = 0x20;
constexpr unsigned kCommonQAvail = 0x28;
constexpr unsigned kCommonQUsed = 0x30;

constexpr uint32_t kConfigAddressEnable = 0x80000000u;

uint8_t byte_at(uint32_t dword, unsigned offset)
{
    return static_cast<uint8_t>(dword >> (8 * (offset & 3)));
}

} // namespace

std::vector<VirtioPciCap> find_virtio_caps(
    const std::function<uint32_t(unsigned)>& read32)
{
    std::vector<VirtioPciCap> caps;
    uint16_t status = static_cast<uint16_t>(read32(kPciCommand) >> 16);
    if (!(status & kPciStatusCapList)) {
        return caps;
    }
    unsigned next = byte_at(read32(kPciCapPointer), 0) & ~3u;
    // At most 48 capabilities fit in 256 bytes: a longer walk is a loop.
    for (int seen = 0; next && seen < 48; seen++) {
        uint32_t head = read32(next);
        if ((head & 0xff) == kPciCapVendor) {
            VirtioPciCap cap{};
            cap.type = byte_at(head, 3);
            cap.bar = byte_at(read32(next + 4), 0);
            cap.offset = read32(next + 8);
            cap.length = read32(next + 12);
            if (cap.type == kCapNotify) {
                cap.notify_multiplier = read32(next + 16);
            }
            caps.push_back(cap);
        }
        next = byte_at(head, 1) & ~3u;
    }
    return caps;
}

std::string virtio_feature_name(unsigned bit)
{
    static const std::map<unsigned, const char*> names = {
        {1, "BLK_F_SIZE_MAX"}, {2, "BLK_F_SEG_MAX"}, {4, "BLK_F_GEOMETRY"},
        {5, "BLK_F_RO"}, {6, "BLK_F_BLK_SIZE"}, {9, "BLK_F_FLUSH"},
        {10, "BLK_F_TOPOLOGY"}, {11, "BLK_F_CONFIG_WCE"}, {12, "BLK_F_MQ"},
        {13, "BLK_F_DISCARD"}, {14, "BLK_F_WRITE_ZEROES"},
        {28, "RING_F_INDIRECT_DESC"}, {29, "RING_F_EVENT_IDX"},
        {32, "F_VERSION_1"}, {33, "F_ACCESS_PLATFORM"}, {34, "F_RING_PACKED"},
    };
    auto it = names.find(bit);
    return it != names.end() ? it->second : "bit " + std::to_string(bit);
}

std::string virtio_feature_names(uint64_t features)
{
    std::string text;
    for (unsigned bit = 0; bit < 64; bit++) {
        if (features & (1ull << bit)) {
            text += (text.empty() ? "" : ", ") + virtio_feature_name(bit);
        }
    }
    return text;
}

VirtioPciDevice::VirtioPciDevice(QtestClient& qtest, unsigned devfn,
                                 uint64_t mmio_base)
    : qtest_(qtest), devfn_(devfn)
{
    uint32_t ids = pci_read32(0);
    vendor_ = static_cast<uint16_t>(ids);
    device_ = static_cast<uint16_t>(ids >> 16);
    if (vendor_ != 0x1af4) {
        throw BenchError("no virtio device at PCI 00:" +
                         std::to_string(devfn >> 3) + "." +
                         std::to_string(devfn & 7) + " (vendor " +
                         std::to_string(vendor_) + ")");
    }
    auto caps = find_virtio_caps([this](unsigned off) { return pci_read32(off); });
    std::array<uint64_t, 6> bar_address{};
    uint64_t next_base = mmio_base;
    bool have_common = false, have_notify = false, have_device = false;
    for (const auto& cap : caps) {
        bool wanted = cap.type == kCapCommon || cap.type == kCapNotify ||
                      cap.type == kCapDevice;
        if (!wanted || cap.bar > 5) {
            continue;
        }
        if (!bar_address[cap.bar]) {
            bar_address[cap.bar] = map_bar(cap.bar, next_base);
        }
        uint64_t where = bar_address[cap.bar] + cap.offset;
        if (cap.type == kCapCommon && !have_common) {
            common_ = where;
            have_common = true;
        } else if (cap.type == kCapNotify && !have_notify) {
            notify_ = where;
            notify_multiplier_ = cap.notify_multiplier;
            have_notify = true;
        } else if (cap.type == kCapDevice && !have_device) {
            device_cfg_ = where;
            have_device = true;
        }
    }
    if (!have_common || !have_notify || !have_device) {
        throw BenchError("the device has no modern virtio-pci interface "
                         "(disable-modern=on?)");
    }
    uint32_t command = pci_read32(kPciCommand) & 0xffff;
    pci_write16(kPciCommand, static_cast<uint16_t>(
        command | kPciCommandMemory | kPciCommandMaster));
}

uint32_t VirtioPciDevice::pci_read32(unsigned offset)
{
    qtest_.write("outl", 0xcf8, kConfigAddressEnable | (devfn_ << 8) | offset);
    return static_cast<uint32_t>(qtest_.read("inl", 0xcfc));
}

void VirtioPciDevice::pci_write32(unsigned offset, uint32_t value)
{
    qtest_.write("outl", 0xcf8, kConfigAddressEnable | (devfn_ << 8) | offset);
    qtest_.write("outl", 0xcfc, value);
}

void VirtioPciDevice::pci_write16(unsigned offset, uint16_t value)
{
    qtest_.write("outl", 0xcf8,
                 kConfigAddressEnable | (devfn_ << 8) | (offset & ~3u));
    qtest_.write("outw", 0xcfc + (offset & 2), value);
}

// Sizes memory BAR @bar, places it at the next suitably aligned address
// from @next_base and returns that address.
uint64_t VirtioPciDevice::map_bar(unsigned bar, uint64_t& next_base)
{
    unsigned reg = kPciBar0 + 4 * bar;
    uint32_t original = pci_read32(reg);
    if (original & 1) {
        throw BenchError("virtio structures in an I/O BAR are not supported");
    }
    bool is64 = ((original >> 1) & 3) == 2;
    pci_write32(reg, 0xffffffffu);
    uint64_t mask = pci_read32(reg) & ~0xfull;
    if (is64) {
        pci_write32(reg + 4, 0xffffffffu);
        mask |= static_cast<uint64_t>(pci_read32(reg + 4)) << 32;
    } else {
        mask |= 0xffffffff00000000ull;
    }
    uint64_t size = ~mask + 1;
    uint64_t address = (next_base + size - 1) / size * size;
    pci_write32(reg, static_cast<uint32_t>(address));
    if (is64) {
        pci_write32(reg + 4, static_cast<uint32_t>(address >> 32));
    }
    next_base = address + size;
    return address;
}

void VirtioPciDevice::reset()
{
    qtest_.write("writeb", common(kCommonStatus), 0);
    for (int tries = 0; status() != 0; tries++) {
        if (tries > 1000) {
            throw BenchError("the device does not finish its reset");
        }
    }
}

uint8_t VirtioPciDevice::status()
{
    return static_cast<uint8_t>(qtest_.read("readb", common(kCommonStatus)));
}

void VirtioPciDevice::add_status(uint8_t bits)
{
    qtest_.write("writeb", common(kCommonStatus), status() | bits);
}

uint64_t VirtioPciDevice::device_features()
{
    qtest_.write("writel", common(kCommonDfSelect), 0);
    uint64_t low = qtest_.read("readl", common(kCommonDf));
    qtest_.write("writel", common(kCommonDfSelect), 1);
    uint64_t high = qtest_.read("readl", common(kCommonDf));
    return (high << 32) | low;
}

uint64_t VirtioPciDevice::negotiate(uint64_t required, uint64_t optional)
{
    reset();
    add_status(kStatusAcknowledge | kStatusDriver);
    uint64_t offered = device_features();
    if (uint64_t missing = required & ~offered) {
        throw BenchError("the device does not offer " +
                         virtio_feature_names(missing) + " (it offers " +
                         virtio_feature_names(offered) + ")");
    }
    uint64_t agreed = required | (optional & offered);
    qtest_.write("writel", common(kCommonGfSelect), 0);
    qtest_.write("writel", common(kCommonGf), static_cast<uint32_t>(agreed));
    qtest_.write("writel", common(kCommonGfSelect), 1);
    qtest_.write("writel", common(kCommonGf), static_cast<uint32_t>(agreed >> 32));
    add_status(kStatusFeaturesOk);
    if (!(status() & kStatusFeaturesOk)) {
        throw BenchError("the device refused the features " +
                         virtio_feature_names(agreed));
    }
    return agreed;
}

unsigned VirtioPciDevice::num_queues()
{
    return static_cast<unsigned>(qtest_.read("readw", common(kCommonNumQueues)));
}

unsigned VirtioPciDevice::queue_max_size(unsigned queue)
{
    qtest_.write("writew", common(kCommonQSelect), queue);
    return static_cast<unsigned>(qtest_.read("readw", common(kCommonQSize)));
}

void VirtioPciDevice::setup_queue(unsigned queue, unsigned size, uint64_t desc,
                                  uint64_t avail, uint64_t used)
{
    qtest_.write("writew", common(kCommonQSelect), queue);
    qtest_.write("writew", common(kCommonQSize), size);
    for (auto [offset, address] : {std::pair{kCommonQDesc, desc},
                                   std::pair{kCommonQAvail, avail},
                                   std::pair{kCommonQUsed, used}}) {
        qtest_.write("writel", common(offset), static_cast<uint32_t>(address));
        qtest_.write("writel", common(offset + 4),
                     static_cast<uint32_t>(address >> 32));
    }
    qtest_.write("writew", common(kCommonQEnable), 1);
}

uint64_t VirtioPciDevice::notify_address(unsigned queue)
{
    qtest_.write("writew", common(kCommonQSelect), queue);
    uint64_t offset = qtest_.read("readw", common(kCommonQNotifyOff));
    return notify_ + offset * notify_multiplier_;
}

void VirtioPciDevice::driver_ok()
{
    add_status(kStatusDriverOk);
    uint8_t now = status();
    if (now & (kStatusNeedsReset | kStatusFailed) || !(now & kStatusDriverOk)) {
        throw BenchError("the device did not accept DRIVER_OK (status " +
                         std::to_string(now) + ")");
    }
}

uint16_t VirtioPciDevice::config_read16(unsigned offset)
{
    return static_cast<uint16_t>(qtest_.read("readw", device_cfg_ + offset));
}

uint32_t VirtioPciDevice::config_read32(unsigned offset)
{
    return static_cast<uint32_t>(qtest_.read("readl", device_cfg_ + offset));
}

uint64_t VirtioPciDevice::config_read64(unsigned offset)
{
    uint64_t low = config_read32(offset);
    return low | (static_cast<uint64_t>(config_read32(offset + 4)) << 32);
}

} // namespace vblk
