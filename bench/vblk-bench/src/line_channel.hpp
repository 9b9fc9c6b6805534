// A line-oriented stream socket with timeouts, used for the qtest and QMP
// connections to QEMU.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>

namespace vblk {

class LineChannel {
public:
    // Called while waiting (@closed false) and when the peer closed the
    // connection (@closed true); throws when the peer is known to be gone.
    using AliveCheck = std::function<void(bool closed)>;

    LineChannel() = default;
    LineChannel(int fd, std::string name, AliveCheck alive);
    LineChannel(LineChannel&& other) noexcept;
    LineChannel& operator=(LineChannel&& other) noexcept;
    LineChannel(const LineChannel&) = delete;
    LineChannel& operator=(const LineChannel&) = delete;
    ~LineChannel();

    void send(const std::string& text);
    // The next line, without its newline; waits at most @timeout.
    std::string read_line(std::chrono::milliseconds timeout);
    // A complete line if one can be had without blocking.
    std::optional<std::string> try_read_line();
    int fd() const { return fd_; }

private:
    std::optional<std::string> take_line();
    bool fill(int timeout_ms);

    int fd_ = -1;
    std::string name_;
    AliveCheck alive_;
    std::string buffered_;
};

} // namespace vblk
