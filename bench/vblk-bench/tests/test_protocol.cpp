// Parsing what QEMU says: qtest answers, QMP messages, /proc files.
#include "error.hpp"
#include "guest_memory.hpp"
#include "qemu_process.hpp"
#include "qmp.hpp"
#include "qtest.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>

using namespace vblk;

TEST(QtestReply, ParsesOkWithAndWithoutValue)
{
    auto plain = parse_qtest_reply("OK");
    EXPECT_EQ(plain.kind, QtestReply::Kind::ok);
    EXPECT_FALSE(plain.value);
    auto hex = parse_qtest_reply("OK 0x00000000000000ff");
    ASSERT_TRUE(hex.value);
    EXPECT_EQ(*hex.value, 0xffu);
    auto decimal = parse_qtest_reply("OK 1234");
    EXPECT_EQ(decimal.value.value_or(0), 1234u);
    EXPECT_FALSE(parse_qtest_reply("OK big").value);
}

TEST(QtestReply, ParsesFailuresAndInterrupts)
{
    auto fail = parse_qtest_reply("FAIL Unknown command 'foo'");
    EXPECT_EQ(fail.kind, QtestReply::Kind::fail);
    EXPECT_EQ(fail.text, "Unknown command 'foo'");
    EXPECT_EQ(parse_qtest_reply("ERR invalid argument size").kind,
              QtestReply::Kind::fail);
    EXPECT_EQ(parse_qtest_reply("IRQ raise 11").kind, QtestReply::Kind::irq);
    EXPECT_THROW(parse_qtest_reply("garbage"), BenchError);
}

TEST(QtestCommand, FormatsHex)
{
    EXPECT_EQ(qtest_command("readl", 0xe0000014), "readl 0xe0000014\n");
    EXPECT_EQ(qtest_command("writew", 0xe0003000, 7), "writew 0xe0003000 0x7\n");
}

namespace {

// A QtestClient whose QEMU is a thread answering on a socketpair.
struct FakeQemu {
    int fds[2];
    FakeQemu() { EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0); }
    ~FakeQemu() { if (fds[1] >= 0) close(fds[1]); }
    void say(const std::string& text) { ASSERT_EQ(write(fds[1], text.data(), text.size()), ssize_t(text.size())); }
    std::string hear(size_t n)
    {
        std::string text(n, '\0');
        size_t got = 0;
        while (got < n) {
            ssize_t r = read(fds[1], text.data() + got, n - got);
            if (r <= 0) break;
            got += r;
        }
        return text;
    }
};

} // namespace

TEST(QtestClient, SkipsInterruptLinesAndReadsValues)
{
    FakeQemu qemu;
    QtestClient client(LineChannel(qemu.fds[0], "qtest", nullptr));
    qemu.say("IRQ raise 3\nOK 0x0000000000001af4\n");
    EXPECT_EQ(client.read("readw", 0x10), 0x1af4u);
    EXPECT_EQ(qemu.hear(11), "readw 0x10\n");
}

TEST(QtestClient, CollectsAsyncAnswersLater)
{
    FakeQemu qemu;
    QtestClient client(LineChannel(qemu.fds[0], "qtest", nullptr));
    client.write_async("writew", 0x100, 1);
    client.write_async("writew", 0x100, 2);
    EXPECT_EQ(client.collect_async(), 2u);
    qemu.say("OK\n");
    EXPECT_EQ(client.collect_async(), 1u);
    // A synchronous command first waits for the rest.
    qemu.say("OK\nOK 0x5\n");
    EXPECT_EQ(client.read("readb", 0x200), 5u);
    EXPECT_EQ(client.async_writes(), 2u);
}

TEST(QtestClient, RefusedDoorbellIsAnError)
{
    FakeQemu qemu;
    QtestClient client(LineChannel(qemu.fds[0], "qtest", nullptr));
    client.write_async("writew", 0x100, 1);
    qemu.say("FAIL nope\n");
    EXPECT_THROW(client.collect_async(), BenchError);
}

TEST(QtestClient, APeerThatGoesAwayIsAnErrorNotAHang)
{
    FakeQemu qemu;
    bool asked = false;
    QtestClient client(LineChannel(qemu.fds[0], "qtest", [&](bool) { asked = true; }));
    close(qemu.fds[1]);
    qemu.fds[1] = -1;
    auto start = std::chrono::steady_clock::now();
    EXPECT_THROW(client.read("readl", 0), BenchError);
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
    EXPECT_TRUE(asked) << "the liveness check runs before giving up";
}

TEST(QtestClient, ASilentPeerIsNoticedByTheLivenessCheck)
{
    FakeQemu qemu;
    int checks = 0;
    QtestClient client(LineChannel(qemu.fds[0], "qtest", [&](bool) {
        if (++checks == 3) {
            throw BenchError("QEMU exited with status 1");
        }
    }));
    EXPECT_THROW(client.read("readl", 0), BenchError);
    EXPECT_EQ(checks, 3);
}

TEST(Qmp, ParsesEachKindOfMessage)
{
    auto greeting = parse_qmp_message(R"({"QMP": {"version": {}, "capabilities": []}})");
    EXPECT_EQ(greeting.kind, QmpMessage::Kind::greeting);
    auto ret = parse_qmp_message(R"({"return": {"rings": []}})");
    EXPECT_EQ(ret.kind, QmpMessage::Kind::ret);
    EXPECT_TRUE(ret.body.contains("rings"));
    auto error = parse_qmp_message(
        R"({"error": {"class": "CommandNotFound", "desc": "The command x does not exist"}})");
    EXPECT_EQ(error.kind, QmpMessage::Kind::error);
    EXPECT_EQ(error.body["desc"], "The command x does not exist");
    auto event = parse_qmp_message(R"({"event": "SHUTDOWN", "data": {}})");
    EXPECT_EQ(event.kind, QmpMessage::Kind::event);
    EXPECT_THROW(parse_qmp_message("not json"), BenchError);
    EXPECT_THROW(parse_qmp_message("[1]"), BenchError);
}

TEST(Qmp, SkipsEventsAndReportsErrors)
{
    FakeQemu qemu;
    std::thread peer([&] {
        qemu.say(R"({"QMP": {}})" "\n");
        qemu.say(R"({"return": {}})" "\n");
        qemu.say(R"({"event": "RESUME"})" "\n" R"({"return": {"fixed-reads": 3}})" "\n");
        qemu.say(R"({"error": {"desc": "no such thing"}})" "\n");
    });
    QmpClient client(LineChannel(qemu.fds[0], "QMP", nullptr));
    EXPECT_EQ(client.execute("x-query-io-uring-buffers")["fixed-reads"], 3);
    try {
        client.execute("bogus");
        FAIL() << "an error reply must throw";
    } catch (const BenchError& error) {
        EXPECT_NE(std::string(error.what()).find("no such thing"), std::string::npos);
    }
    peer.join();
}

TEST(ProcStat, ReadsCpuTimeAfterAnAwkwardCommandName)
{
    std::string line = "1234 (qemu (x) y) S 1 1234 1234 0 -1 4194560 500 0 0 0 "
                       "250 50 0 0 20 0 7 0 100 1000000 5000";
    auto usage = parse_proc_stat(line, 100);
    ASSERT_TRUE(usage);
    EXPECT_DOUBLE_EQ(usage->user_s, 2.5);
    EXPECT_DOUBLE_EQ(usage->system_s, 0.5);
    EXPECT_FALSE(parse_proc_stat("1234 (qemu) S 1 2", 100));
    EXPECT_FALSE(parse_proc_stat("no parenthesis", 100));
}

TEST(ProcStatus, ReadsRss)
{
    ProcUsage usage;
    parse_proc_status("Name:\tqemu\nVmHWM:\t  204800 kB\nVmRSS:\t  102400 kB\n", usage);
    EXPECT_EQ(usage.rss_kib, 102400u);
    EXPECT_EQ(usage.hwm_kib, 204800u);
}

TEST(Mounts, FindsA2MHugetlbfs)
{
    EXPECT_EQ(find_hugetlbfs("tmpfs /dev/shm tmpfs rw 0 0\n"), "");
    EXPECT_EQ(find_hugetlbfs("none /mnt/h1g hugetlbfs rw,pagesize=1024M 0 0\n"
                             "none /dev/hugepages hugetlbfs rw,relatime,pagesize=2M 0 0\n"),
              "/dev/hugepages");
    EXPECT_EQ(find_hugetlbfs("hugetlbfs /h hugetlbfs rw 0 0\n"), "/h");
}
