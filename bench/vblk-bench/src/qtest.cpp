#include "qtest.hpp"

#include "error.hpp"

#include <charconv>
#include <cstdio>

namespace vblk {

namespace {

constexpr std::chrono::milliseconds kReplyTimeout{60000};
// Doorbells in flight before we wait for QEMU to catch up.
constexpr unsigned kMaxOutstanding = 256;

std::optional<uint64_t> parse_number(const std::string& text)
{
    std::string_view digits = text;
    int base = 10;
    if (digits.starts_with("0x") || digits.starts_with("0X")) {
        digits.remove_prefix(2);
        base = 16;
    }
    uint64_t value = 0;
    auto [end, ec] = std::from_chars(digits.data(),
                                     digits.data() + digits.size(), value,
                                     base);
    if (ec != std::errc() || end != digits.data() + digits.size() ||
        digits.empty()) {
        return std::nullopt;
    }
    return value;
}

} // namespace

QtestReply parse_qtest_reply(const std::string& line)
{
    auto space = line.find(' ');
    std::string word = line.substr(0, space);
    std::string rest = space == std::string::npos ? "" : line.substr(space + 1);
    if (word == "OK") {
        return {QtestReply::Kind::ok, rest, parse_number(rest)};
    }
    if (word == "FAIL" || word == "ERR") {
        return {QtestReply::Kind::fail, rest, std::nullopt};
    }
    if (word == "IRQ") {
        return {QtestReply::Kind::irq, rest, std::nullopt};
    }
    throw BenchError("qtest: unexpected answer '" + line + "'");
}

std::string qtest_command(const char* verb, uint64_t addr)
{
    char text[64];
    std::snprintf(text, sizeof(text), "%s 0x%llx\n", verb,
                  static_cast<unsigned long long>(addr));
    return text;
}

std::string qtest_command(const char* verb, uint64_t addr, uint64_t value)
{
    char text[96];
    std::snprintf(text, sizeof(text), "%s 0x%llx 0x%llx\n", verb,
                  static_cast<unsigned long long>(addr),
                  static_cast<unsigned long long>(value));
    return text;
}

QtestClient::QtestClient(LineChannel channel) : channel_(std::move(channel))
{
}

QtestReply QtestClient::next_reply(std::chrono::milliseconds timeout)
{
    for (;;) {
        QtestReply reply = parse_qtest_reply(channel_.read_line(timeout));
        if (reply.kind != QtestReply::Kind::irq) {
            return reply;
        }
    }
}

void QtestClient::check_async(const QtestReply& reply)
{
    if (reply.kind != QtestReply::Kind::ok) {
        throw BenchError("qtest: QEMU refused a doorbell write: " + reply.text);
    }
    outstanding_--;
}

void QtestClient::drain_async()
{
    while (outstanding_) {
        check_async(next_reply(kReplyTimeout));
    }
}

QtestReply QtestClient::exchange(const std::string& command)
{
    drain_async();
    channel_.send(command);
    QtestReply reply = next_reply(kReplyTimeout);
    if (reply.kind != QtestReply::Kind::ok) {
        std::string shown = command.substr(0, command.size() - 1);
        throw BenchError("qtest: '" + shown + "' failed: " + reply.text);
    }
    return reply;
}

uint64_t QtestClient::read(const char* verb, uint64_t addr)
{
    QtestReply reply = exchange(qtest_command(verb, addr));
    if (!reply.value) {
        throw BenchError(std::string("qtest: ") + verb + " returned '" +
                         reply.text + "'");
    }
    return *reply.value;
}

void QtestClient::write(const char* verb, uint64_t addr, uint64_t value)
{
    exchange(qtest_command(verb, addr, value));
}

void QtestClient::write_async(const char* verb, uint64_t addr, uint64_t value)
{
    if (outstanding_ >= kMaxOutstanding) {
        check_async(next_reply(kReplyTimeout));
    }
    channel_.send(qtest_command(verb, addr, value));
    outstanding_++;
    async_total_++;
}

unsigned QtestClient::collect_async()
{
    while (outstanding_) {
        auto line = channel_.try_read_line();
        if (!line) {
            break;
        }
        QtestReply reply = parse_qtest_reply(*line);
        if (reply.kind != QtestReply::Kind::irq) {
            check_async(reply);
        }
    }
    return outstanding_;
}

} // namespace vblk
