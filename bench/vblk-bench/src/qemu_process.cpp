#include "qemu_process.hpp"

#include "error.hpp"

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <poll.h>
#include <sstream>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace vblk {

namespace {

int listen_unix(const std::string& path)
{
    int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (fd < 0 || path.size() >= sizeof(addr.sun_path)) {
        throw BenchError("cannot create socket " + path);
    }
    std::strcpy(addr.sun_path, path.c_str());
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) < 0 ||
        ::listen(fd, 1) < 0) {
        throw BenchError("cannot listen on " + path + ": " +
                         std::strerror(errno));
    }
    return fd;
}

std::string shell_quote(const std::string& word)
{
    if (word.find_first_of(" \t'\"\\$") == std::string::npos && !word.empty()) {
        return word;
    }
    std::string quoted = "'";
    for (char c : word) {
        quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
    }
    return quoted + "'";
}

std::string read_file(const std::string& path)
{
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}

std::string describe_status(int status)
{
    if (WIFEXITED(status)) {
        return "exited with status " + std::to_string(WEXITSTATUS(status));
    }
    if (WIFSIGNALED(status)) {
        return std::string("was killed by signal ") +
               strsignal(WTERMSIG(status));
    }
    return "stopped";
}

} // namespace

std::optional<ProcUsage> parse_proc_stat(const std::string& line,
                                         long ticks_per_s)
{
    // The command name may hold spaces and parentheses: fields are
    // counted after the last ')'.  utime and stime are fields 14 and 15,
    // that is the 12th and 13th after the state (field 3).
    auto close = line.rfind(')');
    if (close == std::string::npos || ticks_per_s <= 0) {
        return std::nullopt;
    }
    std::istringstream fields(line.substr(close + 1));
    std::string field;
    ProcUsage usage;
    for (int index = 3; index <= 15 && fields >> field; index++) {
        char* end = nullptr;
        if (index == 14) {
            usage.user_s = std::strtod(field.c_str(), &end) / ticks_per_s;
        } else if (index == 15) {
            usage.system_s = std::strtod(field.c_str(), &end) / ticks_per_s;
            return *end ? std::nullopt : std::optional(usage);
        } else {
            continue;
        }
        if (*end) {
            return std::nullopt;
        }
    }
    return std::nullopt;
}

void parse_proc_status(const std::string& text, ProcUsage& usage)
{
    std::istringstream lines(text);
    std::string line;
    while (std::getline(lines, line)) {
        unsigned long long kib = 0;
        if (std::sscanf(line.c_str(), "VmRSS: %llu kB", &kib) == 1) {
            usage.rss_kib = kib;
        } else if (std::sscanf(line.c_str(), "VmHWM: %llu kB", &kib) == 1) {
            usage.hwm_kib = kib;
        }
    }
}

QemuProcess::QemuProcess(const QemuLaunch& launch)
{
    char dir_template[] = "/tmp/vblk-bench-XXXXXX";
    if (!::mkdtemp(dir_template)) {
        throw BenchError(std::string("mkdtemp: ") + std::strerror(errno));
    }
    dir_ = dir_template;
    own_log_ = launch.log_path.empty();
    log_path_ = own_log_ ? dir_ + "/qemu.log" : launch.log_path;

    std::string qtest_path = dir_ + "/qtest.sock";
    std::string qmp_path = dir_ + "/qmp.sock";
    qtest_listen_ = listen_unix(qtest_path);
    qmp_listen_ = listen_unix(qmp_path);

    std::vector<std::string> argv = launch.wrapper;
    argv.push_back(launch.binary);
    argv.insert(argv.end(), launch.args.begin(), launch.args.end());
    // Without -qtest-log, QEMU logs every doorbell to stderr.
    argv.insert(argv.end(), {"-qtest", "unix:" + qtest_path, "-qtest-log", "/dev/null",
                             "-chardev", "socket,id=qmp0,path=" + qmp_path,
                             "-mon", "chardev=qmp0,mode=control"});
    for (const auto& word : argv) {
        command_line_ += (command_line_.empty() ? "" : " ") + shell_quote(word);
    }
    spawn(launch, argv);
    accept_connections(launch.start_timeout);
}

void QemuProcess::spawn(const QemuLaunch&, const std::vector<std::string>& argv)
{
    int log = ::open(log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
                     0644);
    if (log < 0) {
        throw BenchError("cannot create " + log_path_ + ": " +
                         std::strerror(errno));
    }
    std::vector<char*> cargv;
    for (const auto& word : argv) {
        cargv.push_back(const_cast<char*>(word.c_str()));
    }
    cargv.push_back(nullptr);

    child_ = ::fork();
    if (child_ < 0) {
        throw BenchError(std::string("fork: ") + std::strerror(errno));
    }
    if (child_ == 0) {
        int null = ::open("/dev/null", O_RDONLY);
        ::dup2(null, 0);
        ::dup2(log, 1);
        ::dup2(log, 2);
        ::execvp(cargv[0], cargv.data());
        dprintf(2, "cannot run %s: %s\n", cargv[0], std::strerror(errno));
        ::_exit(127);
    }
    ::close(log);
    qemu_pid_ = child_;
}

void QemuProcess::accept_connections(std::chrono::seconds timeout)
{
    auto deadline = std::chrono::steady_clock::now() + timeout;
    int qtest_fd = -1, qmp_fd = -1;
    while (qtest_fd < 0 || qmp_fd < 0) {
        check_alive();
        if (std::chrono::steady_clock::now() > deadline) {
            throw BenchError("QEMU did not connect within " +
                             std::to_string(timeout.count()) + " s; its output:\n" +
                             log_tail());
        }
        pollfd fds[2] = {{qtest_listen_, POLLIN, 0}, {qmp_listen_, POLLIN, 0}};
        if (::poll(fds, 2, 100) <= 0) {
            continue;
        }
        if (fds[0].revents & POLLIN) {
            qtest_fd = ::accept4(qtest_listen_, nullptr, nullptr, SOCK_CLOEXEC);
        }
        if (fds[1].revents & POLLIN) {
            qmp_fd = ::accept4(qmp_listen_, nullptr, nullptr, SOCK_CLOEXEC);
        }
    }
    ucred peer{};
    socklen_t len = sizeof(peer);
    if (::getsockopt(qtest_fd, SOL_SOCKET, SO_PEERCRED, &peer, &len) == 0 &&
        peer.pid > 0) {
        qemu_pid_ = peer.pid;
    }
    auto alive = [this](bool closed) {
        if (closed) {
            // QEMU closes its sockets just before it exits: give it the
            // moment it needs, so that its last words are reported.
            wait_exit(std::chrono::seconds(5));
        }
        check_alive();
    };
    qtest_ = std::make_unique<QtestClient>(LineChannel(qtest_fd, "qtest", alive));
    qmp_ = std::make_unique<QmpClient>(LineChannel(qmp_fd, "QMP", alive));
}

std::string QemuProcess::log_tail() const
{
    std::string text = read_file(log_path_);
    constexpr size_t kTail = 4000;
    if (text.size() > kTail) {
        text = "..." + text.substr(text.size() - kTail);
    }
    return text.empty() ? "(no output)" : text;
}

void QemuProcess::fail_exited(int status)
{
    exited_ = true;
    throw BenchError("QEMU " + describe_status(status) + "; its output:\n" +
                     log_tail() + "\ncommand: " + command_line_);
}

void QemuProcess::check_alive()
{
    int status = 0;
    if (reaped_) {
        fail_exited(exit_status_);
    }
    if (::waitpid(child_, &status, WNOHANG) == child_) {
        reaped_ = true;
        exit_status_ = status;
        fail_exited(status);
    }
    if (qemu_pid_ != child_ && ::kill(qemu_pid_, 0) < 0 && errno == ESRCH) {
        throw BenchError("QEMU (pid " + std::to_string(qemu_pid_) +
                         ") is gone; its output:\n" + log_tail());
    }
}

ProcUsage QemuProcess::usage() const
{
    std::string base = "/proc/" + std::to_string(qemu_pid_);
    auto usage = parse_proc_stat(read_file(base + "/stat"),
                                 ::sysconf(_SC_CLK_TCK));
    if (!usage) {
        throw BenchError("cannot read " + base + "/stat");
    }
    parse_proc_status(read_file(base + "/status"), *usage);
    return *usage;
}

bool QemuProcess::wait_exit(std::chrono::milliseconds timeout)
{
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
        if (::waitpid(child_, &exit_status_, WNOHANG) == child_) {
            reaped_ = true;
            exited_ = true;
            return true;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
}

void QemuProcess::quit()
{
    if (exited_) {
        return;
    }
    try {
        qmp_->send_quit();
    } catch (const BenchError&) {
        // Already going away: the wait below tells.
    }
    if (!wait_exit(std::chrono::seconds(30))) {
        ::kill(child_, SIGKILL);
        wait_exit(std::chrono::seconds(5));
    }
}

QemuProcess::~QemuProcess()
{
    qtest_.reset();
    qmp_.reset();
    if (child_ > 0 && !exited_) {
        ::kill(child_, SIGTERM);
        if (!wait_exit(std::chrono::seconds(5))) {
            ::kill(child_, SIGKILL);
            wait_exit(std::chrono::seconds(5));
        }
    }
    for (int fd : {qtest_listen_, qmp_listen_}) {
        if (fd >= 0) {
            ::close(fd);
        }
    }
    ::unlink((dir_ + "/qtest.sock").c_str());
    ::unlink((dir_ + "/qmp.sock").c_str());
    if (own_log_) {
        ::unlink(log_path_.c_str());
    }
    ::rmdir(dir_.c_str());
}

} // namespace vblk
