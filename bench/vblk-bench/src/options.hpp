// The command line of vblk-bench.
#pragma once

#include "workload.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace vblk {

struct Options {
    // QEMU
    std::string qemu;
    std::string target;
    std::string aio = "io_uring";
    bool fixed_buffers = false;
    bool cache_direct = true;
    bool iothread = true;
    std::string iothread_opts;          // appended to -object iothread
    std::string blockdev;               // replaces the generated -blockdev
    std::string blockdev_opts;          // appended to the generated -blockdev
    std::string device_opts;            // appended to -device virtio-blk-pci
    std::string vhost_user_blk;         // a backend's socket: vhost-user-blk-pci
    std::vector<std::string> qemu_args;
    std::vector<std::string> wrapper;
    std::string qemu_log;
    unsigned start_timeout_s = 60;
    bool print_pid = false;
    std::string pid_file;
    int iothread_cpu = -1;              // pin QEMU's iothread there; -1: not
    std::string phase_file;             // "measure", then "end", as they begin
    bool query_fixed = false;           // record x-query-io-uring-buffers

    // Guest RAM
    std::string mem_dir = "/dev/shm";
    bool hugepages = false;
    uint64_t mem = 0;                   // 0: what rings and buffers need
    uint64_t buffer_pool = 0;           // 0: one buffer per request slot

    // Device
    unsigned queues = 1;
    unsigned queue_size = 256;
    unsigned depth = 32;
    bool event_idx = true;
    bool indirect = true;

    // Workload
    WorkloadSpec workload;
    std::string rw = "randread";
    uint64_t size = 0;                  // 0: the whole disk
    double runtime_s = 5;
    double ramp_s = 0;
    uint64_t max_ios = 0;               // 0: no limit
    bool verify = false;
    double stall_timeout_s = 30;
    bool spin = false;                  // never sleep while polling

    // Output
    std::string json_path;              // "-": stdout
    bool quiet = false;
};

// Parses argv; throws BenchError with a message for the user.  Returns
// false when only the help was asked for (and printed to @help_out).
bool parse_options(int argc, const char* const* argv, Options& options,
                   std::string& help_out);

// The usage text.
std::string usage_text();

} // namespace vblk
