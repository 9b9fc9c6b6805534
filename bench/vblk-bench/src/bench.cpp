#include "bench.hpp"

#include "error.hpp"
#include "guest_memory.hpp"
#include "split_ring.hpp"
#include "verify.hpp"
#include "virtio_pci.hpp"
#include "workload.hpp"

#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iostream>
#include <sched.h>
#include <sstream>
#include <sys/resource.h>
#include <sys/stat.h>
#include <thread>

namespace vblk {

namespace {

constexpr unsigned kDevfn = 4 << 3;                 // addr=04.0
constexpr uint64_t kMmioBase = 0xe0000000ull;       // in q35's PCI hole
constexpr uint32_t kBlkTypeIn = 0;
constexpr uint32_t kBlkTypeOut = 1;
constexpr uint8_t kBlkStatusOk = 0;
constexpr uint8_t kStatusUnset = 0xff;
constexpr uint64_t kPage = 4096;
constexpr uint64_t k2M = 2ull << 20;
// A slot's header (16 bytes) and status byte, padded.
constexpr uint64_t kSlotMeta = 32;

std::atomic<bool> stop_requested{false};

uint64_t now_ns()
{
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + ts.tv_nsec;
}

double process_cpu_s()
{
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    return usage.ru_utime.tv_sec + usage.ru_stime.tv_sec +
           (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
}

uint64_t align_up(uint64_t value, uint64_t align)
{
    return (value + align - 1) / align * align;
}

std::string read_text(const std::string& path)
{
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}

ProcUsage usage_delta(const ProcUsage& end, const ProcUsage& start)
{
    ProcUsage delta = end;
    delta.user_s -= start.user_s;
    delta.system_s -= start.system_s;
    return delta;
}

struct Slot {
    uint64_t meta_gpa;          // header; status byte at +16
    uint8_t* meta;
    uint64_t table_gpa;         // indirect table
    VringDesc* table;
    uint64_t buffer_gpa;
    uint8_t* buffer;
    Request request;
    uint32_t generation;        // verify: of a write in flight
    uint64_t submitted_ns;
    bool measured;              // submitted in the measured phase
};

struct Queue {
    unsigned index;
    SplitRing ring;
    uint64_t notify;
    std::vector<Slot> slots;
    std::vector<uint32_t> free_slots;
    unsigned chain;             // descriptors per slot without indirect
};

enum class Phase { ramp, measure, drain, sweep };

class Bench {
public:
    explicit Bench(const Options& options) : options_(options) {}
    RunResult run();

private:
    uint64_t ram_needed() const;
    std::string ram_dir() const;
    std::vector<std::string> qemu_args(const GuestMemory& ram) const;
    std::string blockdev_spec() const;
    void bring_up_device();
    void set_up_queues();
    void announce_pid();
    bool try_submit(Queue& queue);
    void fill_descriptors(Queue& queue, uint32_t slot_index);
    void complete(Queue& queue, const UsedElem& used, uint64_t now);
    void run_phase(Phase phase, uint64_t end_ns);
    bool poll_once(Phase phase);
    void idle(uint64_t since_progress_ns);
    void check_stalled(uint64_t since_progress_ns);
    void begin_measurement();
    void end_measurement();

    const Options& options_;
    RunResult result_;
    std::unique_ptr<GuestMemory> ram_;
    std::unique_ptr<QemuProcess> qemu_;
    std::unique_ptr<VirtioPciDevice> device_;
    std::unique_ptr<Workload> workload_;
    std::unique_ptr<VerifyTracker> verify_;
    std::vector<Queue> queues_;
    std::vector<UsedElem> reaped_;
    unsigned buffers_ = 0;
    unsigned in_flight_ = 0;
    bool submitting_ = true;
    bool measuring_ = false;
    uint64_t measured_submits_ = 0;
    uint64_t measure_start_ns_ = 0;
    uint64_t measure_end_ns_ = 0;
    uint64_t last_check_ns_ = 0;
    uint64_t kicks_ = 0;
    uint64_t kicks_at_start_ = 0;
    ProcUsage qemu_at_start_;
    double tool_at_start_ = 0;
};

unsigned buffer_count(const Options& options)
{
    uint64_t slots = static_cast<uint64_t>(options.queues) * options.depth;
    if (!options.buffer_pool) {
        return static_cast<unsigned>(slots);
    }
    uint64_t each = align_up(options.workload.sizes.largest(), kPage);
    return static_cast<unsigned>(std::clamp<uint64_t>(options.buffer_pool / each, 1, slots));
}

uint64_t Bench::ram_needed() const
{
    const Options& o = options_;
    uint64_t table = (o.workload.segments + 2ull) * sizeof(VringDesc);
    uint64_t per_queue = align_up(desc_table_bytes(o.queue_size), kPage) +
                         align_up(avail_ring_bytes(o.queue_size), kPage) +
                         align_up(used_ring_bytes(o.queue_size), kPage) +
                         align_up(o.depth * kSlotMeta, kPage) +
                         align_up(o.depth * table, kPage);
    uint64_t buffer = align_up(o.workload.sizes.largest(), kPage);
    uint64_t total = (1ull << 20) + o.queues * per_queue +
                     buffer_count(o) * buffer + buffer + 3 * k2M;
    return std::max<uint64_t>(align_up(total, k2M), 64ull << 20);
}

std::string Bench::ram_dir() const
{
    if (!options_.hugepages) {
        return options_.mem_dir;
    }
    std::string dir = find_hugetlbfs(read_text("/proc/mounts"));
    if (dir.empty()) {
        throw BenchError("--hugepages: no hugetlbfs with 2 MiB pages is mounted "
                         "(mount -t hugetlbfs -o pagesize=2M none /dev/hugepages)");
    }
    return dir;
}

std::string Bench::blockdev_spec() const
{
    if (!options_.blockdev.empty()) {
        return options_.blockdev;
    }
    struct stat st{};
    if (::stat(options_.target.c_str(), &st) < 0) {
        throw BenchError("--target " + options_.target + ": " + std::strerror(errno));
    }
    std::string spec = std::string("driver=") +
                       (S_ISBLK(st.st_mode) ? "host_device" : "file") +
                       ",node-name=disk0,filename=" + options_.target +
                       ",aio=" + options_.aio + ",cache.direct=" +
                       (options_.cache_direct ? "on" : "off");
    if (options_.fixed_buffers) {
        spec += ",aio-fixed-buffers=on";
    }
    if (!options_.blockdev_opts.empty()) {
        spec += "," + options_.blockdev_opts;
    }
    return spec;
}

std::vector<std::string> Bench::qemu_args(const GuestMemory& ram) const
{
    bool vhost_user = !options_.vhost_user_blk.empty();
    std::string device = std::string(vhost_user ? "vhost-user-blk-pci,id=vblk0,chardev=vub0"
                                                : "virtio-blk-pci,id=vblk0,drive=disk0") +
                         ",addr=04.0,num-queues=" + std::to_string(options_.queues) +
                         ",queue-size=" + std::to_string(options_.queue_size);
    if (options_.iothread) {
        device += ",iothread=io0";
    }
    if (!options_.device_opts.empty()) {
        device += "," + options_.device_opts;
    }
    std::vector<std::string> args = {
        "-machine", "q35,memory-backend=ram0", "-accel", "qtest",
        "-nodefaults", "-display", "none",
        // Threads named after their role ("IO io0", "worker"), for
        // whoever counts CPU by thread from outside.
        "-name", "vblk-bench,debug-threads=on",
        "-m", std::to_string(ram.size() >> 20) + "M",
        "-object", "memory-backend-file,id=ram0,size=" + std::to_string(ram.size()) +
                   ",mem-path=" + ram.path() + ",share=on",
    };
    if (options_.iothread) {
        std::string spec = "iothread,id=io0";
        if (!options_.iothread_opts.empty()) {
            spec += "," + options_.iothread_opts;
        }
        args.insert(args.end(), {"-object", spec});
    }
    if (vhost_user) {
        // The backend maps guest RAM from the file's descriptor (share=on)
        args.insert(args.end(), {"-chardev", "socket,id=vub0,path=" + options_.vhost_user_blk});
    } else {
        args.insert(args.end(), {"-blockdev", blockdev_spec()});
    }
    args.insert(args.end(), {"-device", device});
    args.insert(args.end(), options_.qemu_args.begin(), options_.qemu_args.end());
    return args;
}

// Data that neither compresses nor deduplicates, for the writes of a
// run without --verify (zram stores pages of zeroes for free).
void fill_noise(uint8_t* buffer, uint64_t len, uint64_t seed)
{
    uint64_t state = seed | 1;
    for (uint64_t at = 0; at + 8 <= len; at += 8) {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        std::memcpy(buffer + at, &state, 8);
    }
}

// Our QEMU pins guest RAM for fixed buffers in a thread of its own, and
// requests meanwhile go without them: wait until it is done, so that none
// is measured.  A QEMU without that registry (stock) answers with an error.
void wait_pinned(QmpClient& qmp)
{
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(5);
    for (;;) {
        Json info;
        try {
            info = qmp.execute("x-query-io-uring-buffers");
        } catch (const BenchError&) {
            return;
        }
        if (!info.value("pinning", false)) {
            return;
        }
        if (std::chrono::steady_clock::now() > deadline) {
            throw BenchError("QEMU still pins guest RAM after 5 minutes");
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
}

// The thread that runs the iothread "io0", as QEMU reports it.
pid_t find_iothread(QmpClient& qmp)
{
    for (const auto& iothread : qmp.execute("query-iothreads")) {
        if (iothread.value("id", "") == "io0") {
            return iothread.at("thread-id").get<pid_t>();
        }
    }
    throw BenchError("--iothread-cpu: QEMU reports no iothread io0");
}

void pin_thread(pid_t tid, int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (::sched_setaffinity(tid, sizeof(set), &set) < 0) {
        throw BenchError("--iothread-cpu " + std::to_string(cpu) + ": " + std::strerror(errno));
    }
}

// Tells an outside observer where the measured time begins and ends.
void write_phase(const std::string& path, const char* phase)
{
    if (!path.empty()) {
        std::ofstream(path, std::ios::app) << phase << "\n";
    }
}

void Bench::announce_pid()
{
    if (options_.iothread_cpu >= 0) {
        pin_thread(find_iothread(qemu_->qmp()), options_.iothread_cpu);
    }
    result_.qemu_pid = qemu_->pid();
    if (options_.print_pid) {
        std::cerr << "qemu-pid " << qemu_->pid() << std::endl;
    }
    if (!options_.pid_file.empty()) {
        std::ofstream(options_.pid_file) << qemu_->pid() << "\n";
    }
}

void Bench::bring_up_device()
{
    device_ = std::make_unique<VirtioPciDevice>(qemu_->qtest(), kDevfn, kMmioBase);
    uint64_t required = 1ull << kFeatureVersion1;
    if (options_.indirect) {
        required |= 1ull << kFeatureIndirectDesc;
    }
    if (options_.event_idx) {
        required |= 1ull << kFeatureEventIdx;
    }
    if (options_.queues > 1) {
        required |= 1ull << kBlkFeatureMq;
    }
    // FLUSH: without it QEMU makes every write write-through.
    uint64_t optional = (1ull << kBlkFeatureSegMax) | (1ull << kBlkFeatureBlkSize) |
                        (1ull << kBlkFeatureFlush);
    result_.features = device_->negotiate(required, optional);
    result_.capacity = device_->config_read64(0) * 512;
    result_.seg_max = (result_.features >> kBlkFeatureSegMax) & 1
                          ? device_->config_read32(12) : 0;

    unsigned have = device_->num_queues();
    if (have < options_.queues) {
        throw BenchError("the device has " + std::to_string(have) +
                         " queues, not " + std::to_string(options_.queues));
    }
    if (result_.seg_max && options_.workload.segments > result_.seg_max) {
        throw BenchError("the device takes at most " + std::to_string(result_.seg_max) +
                         " segments per request (--segments " +
                         std::to_string(options_.workload.segments) + ")");
    }
    set_up_queues();
    device_->driver_ok();
}

void Bench::set_up_queues()
{
    const Options& o = options_;
    unsigned chain = o.workload.segments + 2;
    if (!o.indirect && static_cast<uint64_t>(o.depth) * chain > o.queue_size) {
        throw BenchError("without indirect descriptors, --depth " + std::to_string(o.depth) +
                         " of " + std::to_string(chain) + "-descriptor chains needs a "
                         "--queue-size of at least " + std::to_string(o.depth * chain));
    }
    uint64_t buffer_bytes = align_up(o.workload.sizes.largest(), kPage);
    std::vector<uint64_t> buffer_gpas;
    for (unsigned i = 0; i < buffers_; i++) {
        buffer_gpas.push_back(ram_->allocate(buffer_bytes, kPage));
        if (!o.verify && o.workload.read_percent < 100) {
            fill_noise(ram_->host(buffer_gpas.back(), buffer_bytes), buffer_bytes, i + 1);
        }
    }
    queues_.resize(o.queues);
    unsigned next_buffer = 0;
    for (unsigned q = 0; q < o.queues; q++) {
        unsigned max = device_->queue_max_size(q);
        if (max < o.queue_size) {
            throw BenchError("the device's queue " + std::to_string(q) + " holds " +
                             std::to_string(max) + " entries, not " +
                             std::to_string(o.queue_size));
        }
        Queue& queue = queues_[q];
        queue.index = q;
        queue.chain = chain;
        uint64_t desc = ram_->allocate(desc_table_bytes(o.queue_size), kPage);
        uint64_t avail = ram_->allocate(avail_ring_bytes(o.queue_size), kPage);
        uint64_t used = ram_->allocate(used_ring_bytes(o.queue_size), kPage);
        queue.ring = SplitRing(ram_->host(desc, desc_table_bytes(o.queue_size)),
                               ram_->host(avail, avail_ring_bytes(o.queue_size)),
                               ram_->host(used, used_ring_bytes(o.queue_size)),
                               o.queue_size, o.event_idx);
        queue.ring.suppress_interrupts();
        device_->setup_queue(q, o.queue_size, desc, avail, used);
        queue.notify = device_->notify_address(q);

        uint64_t meta = ram_->allocate(o.depth * kSlotMeta, kPage);
        uint64_t tables = ram_->allocate(o.depth * chain * sizeof(VringDesc), kPage);
        for (unsigned s = 0; s < o.depth; s++) {
            Slot slot{};
            slot.meta_gpa = meta + s * kSlotMeta;
            slot.meta = ram_->host(slot.meta_gpa, kSlotMeta);
            slot.table_gpa = tables + s * chain * sizeof(VringDesc);
            slot.table = reinterpret_cast<VringDesc*>(
                ram_->host(slot.table_gpa, chain * sizeof(VringDesc)));
            slot.buffer_gpa = buffer_gpas[next_buffer++ % buffers_];
            slot.buffer = ram_->host(slot.buffer_gpa, buffer_bytes);
            queue.slots.push_back(slot);
            queue.free_slots.push_back(o.depth - 1 - s);
        }
    }
}

// Writes the request's descriptors: header, data segments, status; as
// an indirect table pointed to by ring descriptor @slot_index, or as a
// chain starting at @slot_index * chain.
void Bench::fill_descriptors(Queue& queue, uint32_t slot_index)
{
    Slot& slot = queue.slots[slot_index];
    const Request& request = slot.request;
    uint16_t data_flags = request.op == Op::read ? kDescWrite : 0;
    SegmentSplit split = split_request(request.len, request.segments);
    uint32_t pieces = split.count;
    bool indirect = options_.indirect;
    unsigned base = indirect ? 0 : slot_index * queue.chain;
    auto entry = [&](unsigned i) -> VringDesc& {
        return indirect ? slot.table[i] : queue.ring.desc(base + i);
    };
    auto link = [&](unsigned i) { return static_cast<uint16_t>(indirect ? i + 1 : base + i + 1); };

    entry(0) = {slot.meta_gpa, 16, kDescNext, link(0)};
    uint64_t at = slot.buffer_gpa;
    for (uint32_t p = 0; p < pieces; p++) {
        uint32_t len = split.length(p);
        entry(p + 1) = {at, len, static_cast<uint16_t>(kDescNext | data_flags), link(p + 1)};
        at += len;
    }
    entry(pieces + 1) = {slot.meta_gpa + 16, 1, kDescWrite, 0};
    if (indirect) {
        queue.ring.desc(slot_index) = {slot.table_gpa,
                                       (pieces + 2) * static_cast<uint32_t>(sizeof(VringDesc)),
                                       kDescIndirect, 0};
    }
}

bool Bench::try_submit(Queue& queue)
{
    if (queue.free_slots.empty() || !workload_->has_more() ||
        (options_.max_ios && measuring_ && measured_submits_ >= options_.max_ios)) {
        return false;
    }
    Request request = workload_->next();
    if (verify_) {
        // Requests in flight must not overlap: try a few others.
        for (int tries = 0; !verify_->can_start(request.offset, request.len); tries++) {
            if (tries == 64 || !workload_->has_more()) {
                return false;
            }
            request = workload_->next();
        }
        verify_->start(request.offset, request.len);
    }
    uint32_t slot_index = queue.free_slots.back();
    queue.free_slots.pop_back();
    Slot& slot = queue.slots[slot_index];
    slot.request = request;
    slot.measured = measuring_;
    if (verify_ && request.op == Op::write) {
        slot.generation = verify_->fill(slot.buffer, request.offset, request.len);
    }
    uint32_t type = request.op == Op::read ? kBlkTypeIn : kBlkTypeOut;
    uint64_t sector = request.offset / 512;
    std::memcpy(slot.meta, &type, 4);
    std::memset(slot.meta + 4, 0, 4);
    std::memcpy(slot.meta + 8, &sector, 8);
    slot.meta[16] = kStatusUnset;
    fill_descriptors(queue, slot_index);
    slot.submitted_ns = now_ns();
    queue.ring.add(static_cast<uint16_t>(options_.indirect ? slot_index
                                                           : slot_index * queue.chain));
    in_flight_++;
    if (measuring_) {
        measured_submits_++;
    }
    return true;
}

void Bench::complete(Queue& queue, const UsedElem& used, uint64_t now)
{
    uint32_t slot_index = options_.indirect ? used.id : used.id / queue.chain;
    if (slot_index >= queue.slots.size() ||
        (!options_.indirect && used.id % queue.chain)) {
        throw BenchError("the device completed descriptor " + std::to_string(used.id) +
                         " on queue " + std::to_string(queue.index) +
                         ", which heads no request");
    }
    Slot& slot = queue.slots[slot_index];
    const Request& request = slot.request;
    uint8_t status = slot.meta[16];
    if (status != kBlkStatusOk) {
        throw BenchError("a " + std::string(request.op == Op::read ? "read" : "write") +
                         " of " + std::to_string(request.len) + " bytes at " +
                         std::to_string(request.offset) + " failed with status " +
                         std::to_string(status) + " (queue " + std::to_string(queue.index) + ")");
    }
    if (verify_) {
        uint32_t expected = request.op == Op::read ? request.len + 1 : 1;
        if (used.len != expected) {
            throw VerifyError("the device reported " + std::to_string(used.len) +
                              " bytes written for a request that wrote " +
                              std::to_string(expected));
        }
        if (request.op == Op::write) {
            verify_->written(request.offset, request.len, slot.generation);
        } else if (auto bad = verify_->check(slot.buffer, request.offset, request.len)) {
            throw VerifyError("verify: " + *bad);
        }
        verify_->finish(request.offset, request.len);
    }
    if (measuring_ && slot.measured) {
        OpTotals& totals = request.op == Op::read ? result_.reads : result_.writes;
        totals.ios++;
        totals.bytes += request.len;
        totals.latency.add(now - slot.submitted_ns);
    }
    queue.free_slots.push_back(slot_index);
    in_flight_--;
}

bool Bench::poll_once(Phase phase)
{
    bool progress = false;
    uint64_t now = now_ns();
    for (Queue& queue : queues_) {
        size_t got = queue.ring.reap(reaped_);
        for (size_t i = 0; i < got; i++) {
            complete(queue, reaped_[i], now);
        }
        if (got) {
            queue.ring.suppress_interrupts();
            progress = true;
        }
        if (phase != Phase::drain) {
            while (try_submit(queue)) {
            }
        }
        if (queue.ring.publish()) {
            qemu_->qtest().write_async("writew", queue.notify, queue.index);
            kicks_++;
        }
    }
    qemu_->qtest().collect_async();
    return progress;
}

void Bench::idle(uint64_t since_progress_ns)
{
    // Spin briefly (a completion is usually microseconds away), then
    // sleep so that QEMU has the CPU on a small machine.
    if (options_.spin || since_progress_ns < 20000) {
        return;
    }
    timespec pause{0, 20000};
    nanosleep(&pause, nullptr);
}

void Bench::check_stalled(uint64_t since_progress_ns)
{
    qemu_->check_alive();
    if (in_flight_ && since_progress_ns > options_.stall_timeout_s * 1e9) {
        uint8_t status = device_->status();
        throw BenchError("no request completed in " +
                         std::to_string(static_cast<int>(options_.stall_timeout_s)) +
                         " s with " + std::to_string(in_flight_) +
                         " in flight; device status 0x" +
                         (std::stringstream() << std::hex << unsigned(status)).str() +
                         ((status & kStatusNeedsReset) ? " (NEEDS_RESET: the device "
                                                        "found a request malformed)" : ""));
    }
}

void Bench::begin_measurement()
{
    measuring_ = true;
    qemu_at_start_ = qemu_->usage();
    tool_at_start_ = process_cpu_s();
    kicks_at_start_ = kicks_;
    measure_start_ns_ = now_ns();
    write_phase(options_.phase_file, "measure");
}

void Bench::end_measurement()
{
    measure_end_ns_ = now_ns();
    write_phase(options_.phase_file, "end");
    measuring_ = false;
    result_.qemu_cpu = usage_delta(qemu_->usage(), qemu_at_start_);
    result_.tool_cpu_s = process_cpu_s() - tool_at_start_;
    result_.kicks = kicks_ - kicks_at_start_;
    result_.seconds = (measure_end_ns_ - measure_start_ns_) / 1e9;
}

// Keeps the queues busy until @end_ns (ramp, measure), until nothing is
// in flight (drain), or until the sweep is read back.
void Bench::run_phase(Phase phase, uint64_t end_ns)
{
    uint64_t last_progress = now_ns();
    for (;;) {
        bool progress = poll_once(phase);
        uint64_t now = now_ns();
        if (progress) {
            last_progress = now;
        }
        if (stop_requested.load(std::memory_order_relaxed)) {
            result_.interrupted = true;
            if (phase != Phase::drain) {
                return;
            }
        }
        bool count_reached = phase == Phase::measure && options_.max_ios &&
                             measured_submits_ >= options_.max_ios &&
                             result_.reads.ios + result_.writes.ios >= options_.max_ios;
        if ((phase == Phase::ramp || phase == Phase::measure) && (now >= end_ns || count_reached)) {
            return;
        }
        if ((phase == Phase::drain || phase == Phase::sweep) && !in_flight_ &&
            (phase == Phase::drain || !workload_->has_more())) {
            return;
        }
        if (now - last_check_ns_ > 100000000) {
            last_check_ns_ = now;
            check_stalled(now - last_progress);
        }
        if (!progress) {
            idle(now - last_progress);
        }
    }
}

RunResult Bench::run()
{
    const Options& o = options_;
    buffers_ = buffer_count(o);
    uint64_t ram_size = std::max(o.mem, ram_needed());
    ram_ = std::make_unique<GuestMemory>(ram_dir(), align_up(ram_size, k2M));
    result_.guest_ram = ram_->size();
    result_.guest_page_size = ram_->page_size();
    result_.buffers = buffers_;

    QemuLaunch launch;
    launch.wrapper = o.wrapper;
    launch.binary = o.qemu;
    launch.args = qemu_args(*ram_);
    launch.start_timeout = std::chrono::seconds(o.start_timeout_s);
    launch.log_path = o.qemu_log;
    qemu_ = std::make_unique<QemuProcess>(launch);
    result_.qemu_command = qemu_->command_line();
    bring_up_device();
    ram_->unlink_file();    // QEMU has it mapped by now
    announce_pid();
    wait_pinned(qemu_->qmp());

    WorkloadSpec spec = o.workload;
    uint64_t usable = result_.capacity > spec.region_offset ? result_.capacity - spec.region_offset : 0;
    spec.region_size = o.size ? std::min(o.size, usable) : usable;
    spec.region_size -= spec.region_size % 512;
    if (spec.region_size < o.workload.sizes.largest()) {
        throw BenchError("the disk region (" + std::to_string(spec.region_size) +
                         " bytes) is smaller than the largest block size");
    }
    workload_ = std::make_unique<Workload>(spec);
    if (o.verify) {
        verify_ = std::make_unique<VerifyTracker>(spec.region_offset, spec.region_size);
    }
    reaped_.resize(o.queue_size);

    uint64_t start = now_ns();
    if (o.ramp_s > 0) {
        run_phase(Phase::ramp, start + static_cast<uint64_t>(o.ramp_s * 1e9));
    }
    begin_measurement();
    run_phase(Phase::measure, measure_start_ns_ + static_cast<uint64_t>(o.runtime_s * 1e9));
    end_measurement();
    run_phase(Phase::drain, 0);
    if (verify_ && !result_.interrupted) {
        workload_->start_sweep(o.workload.sizes.largest());
        run_phase(Phase::sweep, 0);
    }
    if (verify_) {
        result_.verified_bytes = verify_->bytes_checked();
    }
    if (o.query_fixed) {
        result_.fixed_buffers = qemu_->qmp().execute("x-query-io-uring-buffers");
    }
    result_.qemu_end = qemu_->usage();
    qemu_->quit();
    return result_;
}

} // namespace

RunResult run_bench(const Options& options)
{
    Bench bench(options);
    return bench.run();
}

void request_stop()
{
    stop_requested.store(true);
}

} // namespace vblk
