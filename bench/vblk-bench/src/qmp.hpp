// A minimal QMP client: the greeting, qmp_capabilities, then commands
// whose "return" or "error" is the next non-event message.
#pragma once

#include "line_channel.hpp"

#include <nlohmann/json.hpp>
#include <string>

namespace vblk {

using Json = nlohmann::json;

// What one QMP message is, as far as a command's caller cares.
struct QmpMessage {
    enum class Kind { greeting, event, ret, error } kind;
    Json body;     // "return" value, "error" object, event or greeting
};

// Parses one line of QMP; throws BenchError if it is none of the above.
QmpMessage parse_qmp_message(const std::string& line);

class QmpClient {
public:
    explicit QmpClient(LineChannel channel);
    // Runs @command with @arguments and returns its "return" value;
    // throws BenchError with QEMU's description on an error.
    Json execute(const std::string& command, const Json& arguments = nullptr);
    // Sends "quit" without waiting for QEMU to answer.
    void send_quit();

private:
    QmpMessage next_reply();
    LineChannel channel_;
};

} // namespace vblk
