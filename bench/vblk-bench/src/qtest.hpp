// The qtest protocol: one command a line, one "OK [value]" or "FAIL ..."
// answer a line, asynchronous "IRQ ..." lines in between.
#pragma once

#include "line_channel.hpp"

#include <cstdint>
#include <optional>
#include <string>

namespace vblk {

struct QtestReply {
    enum class Kind { ok, fail, irq } kind;
    std::string text;                 // what follows the first word
    std::optional<uint64_t> value;    // "OK 0x..." as a number
};

// Parses one line; throws BenchError on anything else.
QtestReply parse_qtest_reply(const std::string& line);

// Formats a command: "writel 0xe0000000 0x1".
std::string qtest_command(const char* verb, uint64_t addr);
std::string qtest_command(const char* verb, uint64_t addr, uint64_t value);

class QtestClient {
public:
    explicit QtestClient(LineChannel channel);

    uint64_t read(const char* verb, uint64_t addr);     // readl, inb, ...
    void write(const char* verb, uint64_t addr, uint64_t value);
    // A write whose answer is collected later (the doorbell path).
    void write_async(const char* verb, uint64_t addr, uint64_t value);
    // Collect the answers that are already there; returns how many are
    // still outstanding.
    unsigned collect_async();
    unsigned long async_writes() const { return async_total_; }

private:
    QtestReply exchange(const std::string& command);
    QtestReply next_reply(std::chrono::milliseconds timeout);
    void check_async(const QtestReply& reply);
    void drain_async();

    LineChannel channel_;
    unsigned outstanding_ = 0;
    unsigned long async_total_ = 0;
};

} // namespace vblk
