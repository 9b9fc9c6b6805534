// vblk-bench: a guest-less load generator for QEMU's virtio-blk.
#include "bench.hpp"
#include "error.hpp"
#include "options.hpp"
#include "report.hpp"

#include <csignal>
#include <fstream>
#include <iostream>
#include <sys/prctl.h>

namespace {

void on_signal(int)
{
    vblk::request_stop();
}

void install_signal_handlers()
{
    struct sigaction action{};
    action.sa_handler = on_signal;
    sigaction(SIGINT, &action, nullptr);
    sigaction(SIGTERM, &action, nullptr);
    signal(SIGPIPE, SIG_IGN);
    // Short sleeps while polling: ask for 1 us precision, not the default 50.
    prctl(PR_SET_TIMERSLACK, 1000UL);
}

void write_json(const std::string& path, const vblk::Json& json)
{
    if (path == "-") {
        std::cout << json.dump(2) << std::endl;
        return;
    }
    std::ofstream out(path);
    out << json.dump(2) << "\n";
    if (!out) {
        throw vblk::BenchError("cannot write " + path);
    }
}

} // namespace

int main(int argc, char** argv)
{
    vblk::Options options;
    try {
        std::string help;
        if (!vblk::parse_options(argc, argv, options, help)) {
            std::cout << help;
            return 0;
        }
    } catch (const vblk::BenchError& error) {
        std::cerr << "vblk-bench: " << error.what() << std::endl;
        return 2;
    }
    install_signal_handlers();
    try {
        vblk::RunResult result = vblk::run_bench(options);
        if (!options.quiet) {
            // The table goes where the JSON does not.
            (options.json_path == "-" ? std::cerr : std::cout)
                << vblk::result_table(options, result);
        }
        if (!options.json_path.empty()) {
            write_json(options.json_path, vblk::result_json(options, result));
        }
        return result.interrupted ? 130 : 0;
    } catch (const vblk::VerifyError& error) {
        std::cerr << "vblk-bench: " << error.what() << std::endl;
        return 3;
    } catch (const vblk::BenchError& error) {
        std::cerr << "vblk-bench: " << error.what() << std::endl;
        return 1;
    }
}
