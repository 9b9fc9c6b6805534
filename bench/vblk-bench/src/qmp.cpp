#include "qmp.hpp"

#include "error.hpp"

namespace vblk {

namespace {
constexpr std::chrono::milliseconds kQmpTimeout{60000};
}

QmpMessage parse_qmp_message(const std::string& line)
{
    Json message = Json::parse(line, nullptr, false);
    if (message.is_discarded() || !message.is_object()) {
        throw BenchError("QMP: not a JSON object: " + line);
    }
    if (message.contains("return")) {
        return {QmpMessage::Kind::ret, message["return"]};
    }
    if (message.contains("error")) {
        return {QmpMessage::Kind::error, message["error"]};
    }
    if (message.contains("event")) {
        return {QmpMessage::Kind::event, message};
    }
    if (message.contains("QMP")) {
        return {QmpMessage::Kind::greeting, message["QMP"]};
    }
    throw BenchError("QMP: unexpected message: " + line);
}

QmpClient::QmpClient(LineChannel channel) : channel_(std::move(channel))
{
    QmpMessage greeting = parse_qmp_message(channel_.read_line(kQmpTimeout));
    if (greeting.kind != QmpMessage::Kind::greeting) {
        throw BenchError("QMP: no greeting from QEMU");
    }
    execute("qmp_capabilities");
}

QmpMessage QmpClient::next_reply()
{
    for (;;) {
        QmpMessage message = parse_qmp_message(channel_.read_line(kQmpTimeout));
        if (message.kind == QmpMessage::Kind::ret ||
            message.kind == QmpMessage::Kind::error) {
            return message;
        }
    }
}

Json QmpClient::execute(const std::string& command, const Json& arguments)
{
    Json request = {{"execute", command}};
    if (!arguments.is_null()) {
        request["arguments"] = arguments;
    }
    channel_.send(request.dump() + "\n");
    QmpMessage reply = next_reply();
    if (reply.kind == QmpMessage::Kind::error) {
        throw BenchError("QMP " + command + ": " +
                         reply.body.value("desc", reply.body.dump()));
    }
    return reply.body;
}

void QmpClient::send_quit()
{
    channel_.send("{\"execute\": \"quit\"}\n");
}

} // namespace vblk
