#include "options.hpp"

#include "error.hpp"

#include <cstdlib>
#include <functional>
#include <map>
#include <sched.h>
#include <sstream>

namespace vblk {

namespace {

std::vector<std::string> split_words(const std::string& text)
{
    std::istringstream in(text);
    std::vector<std::string> words;
    std::string word;
    while (in >> word) {
        words.push_back(word);
    }
    return words;
}

uint64_t need_size(const std::string& name, const std::string& value)
{
    auto size = parse_size(value);
    if (!size) {
        throw BenchError(name + ": '" + value + "' is not a size (like 4k, 1m, 2g)");
    }
    return *size;
}

unsigned need_count(const std::string& name, const std::string& value,
                    unsigned low, unsigned high)
{
    char* end = nullptr;
    unsigned long number = std::strtoul(value.c_str(), &end, 10);
    if (value.empty() || *end || number < low || number > high) {
        throw BenchError(name + ": '" + value + "' is not a number from " +
                         std::to_string(low) + " to " + std::to_string(high));
    }
    return static_cast<unsigned>(number);
}

double need_seconds(const std::string& name, const std::string& value)
{
    char* end = nullptr;
    double seconds = std::strtod(value.c_str(), &end);
    if (value.empty() || *end || seconds < 0) {
        throw BenchError(name + ": '" + value + "' is not a number of seconds");
    }
    return seconds;
}

bool need_on_off(const std::string& name, const std::string& value)
{
    if (value == "on") {
        return true;
    }
    if (value == "off") {
        return false;
    }
    throw BenchError(name + ": say on or off");
}

void apply_rw(Options& options)
{
    static const std::map<std::string, std::pair<bool, int>> modes = {
        {"randread", {false, 100}}, {"randwrite", {false, 0}},
        {"randrw", {false, -1}}, {"read", {true, 100}}, {"write", {true, 0}},
        {"rw", {true, -1}},
    };
    auto it = modes.find(options.rw);
    if (it == modes.end()) {
        throw BenchError("--rw: one of randread, randwrite, randrw, read, write, rw");
    }
    options.workload.sequential = it->second.first;
    if (it->second.second >= 0) {
        options.workload.read_percent = static_cast<unsigned>(it->second.second);
    }
}

} // namespace

std::string usage_text()
{
    return R"(usage: vblk-bench --qemu QEMU --target FILE|DEVICE [options]

Plays the guest's virtio-blk driver against QEMU run with -accel qtest:
guest RAM is a shared file mapped by both, rings and buffers are written
directly, qtest carries only PCI set-up and doorbells.

QEMU:
  --qemu PATH            qemu-system-x86_64 to run (or $VBLK_BENCH_QEMU)
  --target PATH          file or block device to serve
  --aio MODE             threads, native or io_uring [io_uring]
  --fixed-buffers on|off aio-fixed-buffers=on (vblk-uring's QEMU only) [off]
  --cache-direct on|off  O_DIRECT on the target [on]
  --iothread on|off      serve the device from an iothread [on]
  --iothread-opts OPTS   appended to -object iothread,id=io0 (e.g.
                         poll-max-ns=0)
  --blockdev SPEC        use this -blockdev (node-name=disk0) instead
  --blockdev-opts OPTS   appended to the generated -blockdev
  --device-opts OPTS     appended to -device virtio-blk-pci,...
  --vhost-user-blk SOCK  vhost-user-blk-pci on a backend listening there
                         (qemu-storage-daemon's vhost-user-blk export)
                         instead of virtio-blk-pci: no -blockdev, no
                         iothread in QEMU, no --target
  --qemu-arg ARG         one more QEMU argument (repeatable)
  --wrapper "CMD ..."    run QEMU under this prefix, e.g. "valgrind
                         --tool=massif" or "env LD_PRELOAD=lib.so"
  --qemu-log FILE        keep QEMU's stdout and stderr there
  --start-timeout SEC    how long QEMU may take to come up [60]
  --print-pid            print "qemu-pid PID" on stderr once QEMU is up
  --pid-file FILE        write QEMU's pid there once it is up
  --iothread-cpu N       pin QEMU's iothread (only that thread) to CPU N
  --phase-file FILE      write "measure" there when the measured time
                         begins and "end" when it ends (for an outside
                         observer of CPU use)
  --query-fixed          record x-query-io-uring-buffers (implied by
                         --fixed-buffers on)
Guest RAM:
  --mem-dir DIR          tmpfs or hugetlbfs directory for the RAM file [/dev/shm]
  --hugepages            put guest RAM on a mounted 2 MiB hugetlbfs
  --mem SIZE             guest RAM size [what rings and buffers need]
  --buffer-pool SIZE     at most this much for data buffers; slots share
                         them beyond it (not with --verify) [one per slot]
Device:
  --queues N             virtqueues, 1..1024 [1]
  --queue-size N         entries per virtqueue (QEMU: power of 2, <= 32768) [256]
  --depth N              requests in flight per queue [32]
  --no-event-idx         do not negotiate VIRTIO_RING_F_EVENT_IDX
  --no-indirect          descriptor chains instead of indirect tables
Workload:
  --rw MODE              randread, randwrite, randrw, read, write, rw [randread]
  --rwmix-read PCT       reads in randrw/rw [50]
  --bs SIZES             4k | 4k,16k,1m | 4k-1m (multiples of the first) [4k]
  --segments N           data segments per request (fragmentation) [1]
  --size SIZE            bytes of the disk to use [all]
  --offset SIZE          where that region starts [0]
  --runtime SEC          measured time [5]
  --ramp SEC             unmeasured warm-up before it [0]
  --ios N                stop after N measured requests
  --verify               check every read against what was written, then
                         read the whole region back
  --seed N               random seed [1]
  --stall-timeout SEC    fail when nothing completes this long [30]
  --spin                 poll without ever sleeping
Output:
  --json FILE            write the results as JSON ("-": stdout)
  --quiet                no human-readable table
)";
}

bool parse_options(int argc, const char* const* argv, Options& options,
                   std::string& help_out)
{
    std::string bs = "4k";
    int rwmix = -1;
    using Handler = std::function<void(const std::string&)>;
    const std::map<std::string, Handler> valued = {
        {"--qemu", [&](auto& v) { options.qemu = v; }},
        {"--target", [&](auto& v) { options.target = v; }},
        {"--aio", [&](auto& v) { options.aio = v; }},
        {"--fixed-buffers", [&](auto& v) { options.fixed_buffers = need_on_off("--fixed-buffers", v); }},
        {"--cache-direct", [&](auto& v) { options.cache_direct = need_on_off("--cache-direct", v); }},
        {"--iothread", [&](auto& v) { options.iothread = need_on_off("--iothread", v); }},
        {"--iothread-opts", [&](auto& v) { options.iothread_opts = v; }},
        {"--blockdev", [&](auto& v) { options.blockdev = v; }},
        {"--blockdev-opts", [&](auto& v) { options.blockdev_opts = v; }},
        {"--device-opts", [&](auto& v) { options.device_opts = v; }},
        {"--vhost-user-blk", [&](auto& v) { options.vhost_user_blk = v; }},
        {"--qemu-arg", [&](auto& v) { options.qemu_args.push_back(v); }},
        {"--wrapper", [&](auto& v) { options.wrapper = split_words(v); }},
        {"--qemu-log", [&](auto& v) { options.qemu_log = v; }},
        {"--start-timeout", [&](auto& v) { options.start_timeout_s = need_count("--start-timeout", v, 1, 86400); }},
        {"--pid-file", [&](auto& v) { options.pid_file = v; }},
        {"--iothread-cpu", [&](auto& v) { options.iothread_cpu = static_cast<int>(need_count("--iothread-cpu", v, 0, CPU_SETSIZE - 1)); }},
        {"--phase-file", [&](auto& v) { options.phase_file = v; }},
        {"--mem-dir", [&](auto& v) { options.mem_dir = v; }},
        {"--mem", [&](auto& v) { options.mem = need_size("--mem", v); }},
        {"--buffer-pool", [&](auto& v) { options.buffer_pool = need_size("--buffer-pool", v); }},
        {"--queues", [&](auto& v) { options.queues = need_count("--queues", v, 1, 1024); }},
        {"--queue-size", [&](auto& v) { options.queue_size = need_count("--queue-size", v, 1, 32768); }},
        {"--depth", [&](auto& v) { options.depth = need_count("--depth", v, 1, 32768); }},
        {"--rw", [&](auto& v) { options.rw = v; }},
        {"--rwmix-read", [&](auto& v) { rwmix = static_cast<int>(need_count("--rwmix-read", v, 0, 100)); }},
        {"--bs", [&](auto& v) { bs = v; }},
        {"--segments", [&](auto& v) { options.workload.segments = need_count("--segments", v, 1, 32768); }},
        {"--size", [&](auto& v) { options.size = need_size("--size", v); }},
        {"--offset", [&](auto& v) { options.workload.region_offset = need_size("--offset", v); }},
        {"--runtime", [&](auto& v) { options.runtime_s = need_seconds("--runtime", v); }},
        {"--ramp", [&](auto& v) { options.ramp_s = need_seconds("--ramp", v); }},
        {"--ios", [&](auto& v) { options.max_ios = need_size("--ios", v); }},
        {"--seed", [&](auto& v) { options.workload.seed = need_size("--seed", v); }},
        {"--stall-timeout", [&](auto& v) { options.stall_timeout_s = need_seconds("--stall-timeout", v); }},
        {"--json", [&](auto& v) { options.json_path = v; }},
    };
    const std::map<std::string, std::function<void()>> flags = {
        {"--print-pid", [&] { options.print_pid = true; }},
        {"--query-fixed", [&] { options.query_fixed = true; }},
        {"--hugepages", [&] { options.hugepages = true; }},
        {"--no-event-idx", [&] { options.event_idx = false; }},
        {"--no-indirect", [&] { options.indirect = false; }},
        {"--verify", [&] { options.verify = true; }},
        {"--spin", [&] { options.spin = true; }},
        {"--quiet", [&] { options.quiet = true; }},
    };

    for (int i = 1; i < argc; i++) {
        std::string arg = argv[i];
        if (arg == "-h" || arg == "--help") {
            help_out = usage_text();
            return false;
        }
        std::string value;
        bool has_value = false;
        if (auto eq = arg.find('='); eq != std::string::npos && arg.starts_with("--")) {
            value = arg.substr(eq + 1);
            arg = arg.substr(0, eq);
            has_value = true;
        }
        if (auto flag = flags.find(arg); flag != flags.end() && !has_value) {
            flag->second();
            continue;
        }
        auto handler = valued.find(arg);
        if (handler == valued.end()) {
            throw BenchError("unknown option " + arg + " (see --help)");
        }
        if (!has_value) {
            if (i + 1 >= argc) {
                throw BenchError(arg + " needs a value");
            }
            value = argv[++i];
        }
        handler->second(value);
    }

    if (options.qemu.empty()) {
        const char* from_env = std::getenv("VBLK_BENCH_QEMU");
        options.qemu = from_env ? from_env : "";
    }
    if (options.qemu.empty() ||
        (options.target.empty() && options.vhost_user_blk.empty())) {
        throw BenchError("--qemu and --target (or --vhost-user-blk) are required (see --help)");
    }
    if (!options.vhost_user_blk.empty()) {
        // The backend serves the disk: QEMU has no block node, no iothread
        if (options.fixed_buffers || !options.blockdev.empty() ||
            !options.blockdev_opts.empty() || options.iothread_cpu >= 0) {
            throw BenchError("--vhost-user-blk: the backend serves the disk; "
                             "--fixed-buffers, --blockdev, --blockdev-opts and "
                             "--iothread-cpu are its business");
        }
        options.iothread = false;
    }
    auto sizes = parse_block_sizes(bs);
    if (!sizes) {
        throw BenchError("--bs: '" + bs + "' is not a size, list or range of "
                         "multiples of 512 (up to 2g)");
    }
    options.workload.sizes = *sizes;
    apply_rw(options);
    if (rwmix >= 0) {
        options.workload.read_percent = static_cast<unsigned>(rwmix);
    } else if (options.rw == "randrw" || options.rw == "rw") {
        options.workload.read_percent = 50;
    }
    if (options.fixed_buffers) {
        options.query_fixed = true;
    }
    if (options.depth > options.queue_size) {
        throw BenchError("--depth " + std::to_string(options.depth) +
                         " is more than --queue-size " +
                         std::to_string(options.queue_size));
    }
    if (options.verify && options.buffer_pool) {
        throw BenchError("--verify needs a buffer per request: no --buffer-pool");
    }
    return true;
}

} // namespace vblk
