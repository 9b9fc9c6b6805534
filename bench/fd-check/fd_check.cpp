// SPDX-License-Identifier: GPL-2.0-or-later
//
// LD_PRELOAD library that reports each close() of a descriptor that is
// not open: a descriptor closed twice.  The second close of a pair is
// harmless only while nothing else got the number in between; in a
// threaded process another thread may have (an accepted socket, a file
// descriptor received over one), and the second close takes it away.
// Each such close appends to $FD_CHECK_OUT a line
//
//   close(N): not open, thread T
//
// followed by its backtrace, one frame a line.  Negative descriptors are
// not reported: close(-1) is a common, harmless idiom.

#include <execinfo.h>
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>

namespace {

void report(int fd)
{
    const char* path = getenv("FD_CHECK_OUT");
    if (!path) {
        return;
    }
    int out = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (out < 0) {
        return;
    }
    dprintf(out, "close(%d): not open, thread %ld\n", fd,
            static_cast<long>(syscall(SYS_gettid)));
    void* frames[24];
    backtrace_symbols_fd(frames, backtrace(frames, 24), out);
    syscall(SYS_close, out);
}

}  // namespace

extern "C" int close(int fd)
{
    long ret = syscall(SYS_close, fd);
    if (ret < 0 && errno == EBADF && fd >= 0) {
        report(fd);
        errno = EBADF;
    }
    return static_cast<int>(ret);
}
