// QEMU as a child process: started with the qtest accelerator, talking
// qtest and QMP over two Unix sockets we listen on, watched so that its
// death is an error with its last words instead of a hang.
#pragma once

#include "qmp.hpp"
#include "qtest.hpp"

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <sys/types.h>
#include <vector>

namespace vblk {

struct QemuLaunch {
    std::vector<std::string> wrapper;   // e.g. {"valgrind", "--tool=massif"}
    std::string binary;
    std::vector<std::string> args;      // all but the qtest/QMP sockets
    std::chrono::seconds start_timeout{60};
    std::string log_path;               // QEMU's stdout and stderr; empty: a temporary file
};

// CPU time and memory of a process, from /proc/PID/stat and status.
struct ProcUsage {
    double user_s = 0;
    double system_s = 0;
    uint64_t rss_kib = 0;
    uint64_t hwm_kib = 0;   // peak RSS
};

// Parses the utime and stime fields of a /proc/PID/stat line (in clock
// ticks of @ticks_per_s).  Returns nullopt when the line is malformed.
std::optional<ProcUsage> parse_proc_stat(const std::string& line,
                                         long ticks_per_s);
// Adds VmRSS and VmHWM from the text of /proc/PID/status.
void parse_proc_status(const std::string& text, ProcUsage& usage);

class QemuProcess {
public:
    explicit QemuProcess(const QemuLaunch& launch);
    ~QemuProcess();
    QemuProcess(const QemuProcess&) = delete;
    QemuProcess& operator=(const QemuProcess&) = delete;

    QtestClient& qtest() { return *qtest_; }
    QmpClient& qmp() { return *qmp_; }
    // QEMU's own pid: the peer of the qtest socket, which is not the
    // child's pid when a wrapper runs QEMU as a process of its own.
    pid_t pid() const { return qemu_pid_; }
    // Throws BenchError when QEMU has exited.
    void check_alive();
    ProcUsage usage() const;
    // Asks QEMU to quit and waits for it; kills it if it does not.
    void quit();
    const std::string& command_line() const { return command_line_; }

private:
    void spawn(const QemuLaunch& launch, const std::vector<std::string>& argv);
    void accept_connections(std::chrono::seconds timeout);
    [[noreturn]] void fail_exited(int status);
    std::string log_tail() const;
    bool wait_exit(std::chrono::milliseconds timeout);

    std::string dir_;
    std::string log_path_;
    bool own_log_ = false;
    std::string command_line_;
    int qtest_listen_ = -1;
    int qmp_listen_ = -1;
    pid_t child_ = -1;
    pid_t qemu_pid_ = -1;
    bool exited_ = false;
    bool reaped_ = false;
    int exit_status_ = 0;
    std::unique_ptr<QtestClient> qtest_;
    std::unique_ptr<QmpClient> qmp_;
};

} // namespace vblk
