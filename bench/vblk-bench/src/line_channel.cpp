#include "line_channel.hpp"

#include "error.hpp"

#include <cerrno>
#include <cstring>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <utility>

namespace vblk {

LineChannel::LineChannel(int fd, std::string name, AliveCheck alive)
    : fd_(fd), name_(std::move(name)), alive_(std::move(alive))
{
}

LineChannel::LineChannel(LineChannel&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), name_(std::move(other.name_)),
      alive_(std::move(other.alive_)), buffered_(std::move(other.buffered_))
{
}

LineChannel& LineChannel::operator=(LineChannel&& other) noexcept
{
    if (this != &other) {
        if (fd_ >= 0) {
            ::close(fd_);
        }
        fd_ = std::exchange(other.fd_, -1);
        name_ = std::move(other.name_);
        alive_ = std::move(other.alive_);
        buffered_ = std::move(other.buffered_);
    }
    return *this;
}

LineChannel::~LineChannel()
{
    if (fd_ >= 0) {
        ::close(fd_);
    }
}

void LineChannel::send(const std::string& text)
{
    size_t done = 0;
    while (done < text.size()) {
        ssize_t n = ::send(fd_, text.data() + done, text.size() - done,
                           MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            if (alive_) {
                alive_(true);
            }
            throw BenchError(name_ + ": write failed: " + std::strerror(errno));
        }
        done += static_cast<size_t>(n);
    }
}

std::optional<std::string> LineChannel::take_line()
{
    auto nl = buffered_.find('\n');
    if (nl == std::string::npos) {
        return std::nullopt;
    }
    std::string line = buffered_.substr(0, nl);
    buffered_.erase(0, nl + 1);
    if (!line.empty() && line.back() == '\r') {
        line.pop_back();
    }
    return line;
}

// Read what is there after waiting up to @timeout_ms; false on timeout.
bool LineChannel::fill(int timeout_ms)
{
    pollfd pfd{fd_, POLLIN, 0};
    int ready = ::poll(&pfd, 1, timeout_ms);
    if (ready < 0 && errno != EINTR) {
        throw BenchError(name_ + ": poll failed: " + std::strerror(errno));
    }
    if (ready <= 0) {
        return false;
    }
    char chunk[65536];
    ssize_t n = ::recv(fd_, chunk, sizeof(chunk), 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) {
        return true;
    }
    if (n <= 0) {
        if (alive_) {
            alive_(true);
        }
        throw BenchError(name_ + ": QEMU closed the connection");
    }
    buffered_.append(chunk, static_cast<size_t>(n));
    return true;
}

std::string LineChannel::read_line(std::chrono::milliseconds timeout)
{
    auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
        if (auto line = take_line()) {
            return *line;
        }
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0) {
            if (alive_) {
                alive_(false);
            }
            throw BenchError(name_ + ": no answer from QEMU in " +
                             std::to_string(timeout.count() / 1000) + " s");
        }
        // Wake up now and then to notice a QEMU that died without closing.
        if (!fill(static_cast<int>(std::min<long>(left.count(), 200))) &&
            alive_) {
            alive_(false);
        }
    }
}

std::optional<std::string> LineChannel::try_read_line()
{
    if (auto line = take_line()) {
        return line;
    }
    fill(0);
    return take_line();
}

} // namespace vblk
