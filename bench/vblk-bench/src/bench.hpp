// One run: start QEMU, bring the virtio-blk device up, keep its queues
// full for the requested time, and measure.
#pragma once

#include "error.hpp"
#include "options.hpp"
#include "qemu_process.hpp"
#include "stats.hpp"

#include <cstdint>
#include <string>

namespace vblk {

struct RunResult {
    std::string qemu_command;
    int qemu_pid = 0;
    uint64_t capacity = 0;          // bytes
    uint64_t features = 0;          // negotiated
    unsigned seg_max = 0;
    uint64_t guest_ram = 0;
    uint64_t guest_page_size = 0;
    unsigned buffers = 0;           // distinct data buffers
    double seconds = 0;             // measured
    OpTotals reads, writes;
    ProcUsage qemu_cpu;             // during the measured time
    ProcUsage qemu_end;             // at the end, memory included
    double tool_cpu_s = 0;          // ours, during the measured time
    uint64_t kicks = 0;             // doorbells written, measured time
    uint64_t verified_bytes = 0;
    Json fixed_buffers;             // x-query-io-uring-buffers, or null
    bool interrupted = false;
};

// Throws BenchError on anything that keeps the run from a valid result
// (QEMU dies, the device refuses, a request fails, verification fails).
RunResult run_bench(const Options& options);

// Thrown when verification finds bad data (exit status 3).
class VerifyError : public BenchError {
public:
    using BenchError::BenchError;
};

// Ask a run in progress to stop (from a signal handler).
void request_stop();

} // namespace vblk
