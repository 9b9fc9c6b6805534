#include "report.hpp"

#include <cstdio>

namespace vblk {

namespace {

constexpr double kPercentiles[] = {50, 90, 99, 99.9, 99.99};

Json latency_json(const LatencyHistogram& latency)
{
    Json percentiles = Json::object();
    for (double p : kPercentiles) {
        char name[16];
        std::snprintf(name, sizeof(name), "%g", p);
        percentiles[name] = latency.percentile(p) / 1000.0;
    }
    return {{"min_us", latency.min() / 1000.0}, {"mean_us", latency.mean() / 1000.0},
            {"max_us", latency.max() / 1000.0}, {"percentiles_us", percentiles}};
}

Json totals_json(const OpTotals& totals, double seconds)
{
    return {{"ios", totals.ios}, {"bytes", totals.bytes},
            {"iops", seconds > 0 ? totals.ios / seconds : 0},
            {"mb_per_s", seconds > 0 ? totals.bytes / seconds / 1e6 : 0},
            {"latency", latency_json(totals.latency)}};
}

OpTotals combined(const RunResult& result)
{
    OpTotals all = result.reads;
    all.ios += result.writes.ios;
    all.bytes += result.writes.bytes;
    all.latency.merge(result.writes.latency);
    return all;
}

// Fixed reads, writes and fallbacks summed over QEMU's rings.
Json fixed_summary(const Json& info)
{
    uint64_t reads = 0, writes = 0, fallbacks = 0;
    Json by_reason = Json::object();
    const Json no_rings = Json::array();
    for (const Json& ring : info.contains("rings") ? info["rings"] : no_rings) {
        reads += ring.value("fixed-reads", 0ull);
        writes += ring.value("fixed-writes", 0ull);
        if (!ring.contains("fallbacks")) {
            continue;
        }
        // A list of {reason, count}, every reason once
        for (const Json& f : ring["fallbacks"]) {
            std::string reason = f.at("reason").get<std::string>();
            uint64_t n = f.at("count").get<uint64_t>();
            fallbacks += n;
            by_reason[reason] = by_reason.value(reason, 0ull) + n;
        }
    }
    return {{"fixed_reads", reads}, {"fixed_writes", writes},
            {"fallbacks", fallbacks}, {"fallbacks_by_reason", by_reason}};
}

} // namespace

Json result_json(const Options& o, const RunResult& r)
{
    OpTotals all = combined(r);
    double cpu = r.qemu_cpu.user_s + r.qemu_cpu.system_s;
    Json json = {
        {"config", {
            {"target", o.target}, {"aio", o.aio}, {"fixed_buffers", o.fixed_buffers},
            {"vhost_user_blk", o.vhost_user_blk},
            {"rw", o.rw},
            {"read_percent", o.workload.read_percent},
            {"bs", o.workload.sizes.describe()}, {"segments", o.workload.segments},
            {"queues", o.queues}, {"queue_size", o.queue_size}, {"depth", o.depth},
            {"event_idx", o.event_idx}, {"indirect", o.indirect},
            {"iothread", o.iothread}, {"runtime_s", o.runtime_s}, {"ramp_s", o.ramp_s},
            {"verify", o.verify}, {"guest_ram_bytes", r.guest_ram},
            {"guest_page_size", r.guest_page_size},
            {"buffers", r.buffers},
        }},
        {"qemu", {
            {"pid", r.qemu_pid}, {"command", r.qemu_command},
            {"cpu_user_s", r.qemu_cpu.user_s}, {"cpu_system_s", r.qemu_cpu.system_s},
            {"cpu_us_per_io", all.ios ? cpu * 1e6 / all.ios : 0},
            {"rss_kib", r.qemu_end.rss_kib}, {"peak_rss_kib", r.qemu_end.hwm_kib},
        }},
        {"device", {{"capacity_bytes", r.capacity}, {"features", r.features},
                    {"seg_max", r.seg_max}}},
        {"seconds", r.seconds},
        {"tool_cpu_s", r.tool_cpu_s},
        {"kicks", r.kicks},
        {"kicks_per_io", all.ios ? static_cast<double>(r.kicks) / all.ios : 0},
        {"all", totals_json(all, r.seconds)},
        {"read", totals_json(r.reads, r.seconds)},
        {"write", totals_json(r.writes, r.seconds)},
        {"verified_bytes", r.verified_bytes},
        {"interrupted", r.interrupted},
    };
    if (!r.fixed_buffers.is_null()) {
        json["io_uring_buffers"] = r.fixed_buffers;
        json["fixed"] = fixed_summary(r.fixed_buffers);
    }
    return json;
}

std::string result_table(const Options& o, const RunResult& r)
{
    OpTotals all = combined(r);
    double cpu = r.qemu_cpu.user_s + r.qemu_cpu.system_s;
    std::string text;
    char line[512];
    std::snprintf(line, sizeof(line),
                  "vblk-bench: %s bs=%s segments=%u queues=%u depth=%u "
                  "(queue-size %u) aio=%s fixed-buffers=%s ram=%s%s\n",
                  o.rw.c_str(), o.workload.sizes.describe().c_str(),
                  o.workload.segments, o.queues, o.depth, o.queue_size,
                  o.aio.c_str(), o.fixed_buffers ? "on" : "off",
                  format_size(r.guest_page_size).c_str(), r.interrupted ? " (interrupted)" : "");
    text += line;
    std::string target = o.vhost_user_blk.empty() ? o.target
                                                  : "vhost-user-blk at " + o.vhost_user_blk;
    std::snprintf(line, sizeof(line), "target %s, %.2f s measured, QEMU pid %d\n",
                  target.c_str(), r.seconds, r.qemu_pid);
    text += line;
    text += "        ios        IOPS      MB/s  lat(us) mean     p50     p90     p99   p99.9     max\n";
    auto row = [&](const char* name, const OpTotals& t) {
        if (!t.ios) {
            return;
        }
        const LatencyHistogram& l = t.latency;
        std::snprintf(line, sizeof(line),
                      "%-5s %9llu %11.0f %9.1f %12.1f %7.1f %7.1f %7.1f %7.1f %7.1f\n",
                      name, static_cast<unsigned long long>(t.ios), t.ios / r.seconds,
                      t.bytes / r.seconds / 1e6, l.mean() / 1e3, l.percentile(50) / 1e3,
                      l.percentile(90) / 1e3, l.percentile(99) / 1e3,
                      l.percentile(99.9) / 1e3, l.max() / 1e3);
        text += line;
    };
    row("read", r.reads);
    row("write", r.writes);
    if (r.reads.ios && r.writes.ios) {
        row("all", all);
    }
    std::snprintf(line, sizeof(line),
                  "QEMU CPU %.2f s (%.1f us/io), RSS %llu KiB (peak %llu); "
                  "doorbells %llu (%.4f/io); our CPU %.2f s\n",
                  cpu, all.ios ? cpu * 1e6 / all.ios : 0.0,
                  static_cast<unsigned long long>(r.qemu_end.rss_kib),
                  static_cast<unsigned long long>(r.qemu_end.hwm_kib),
                  static_cast<unsigned long long>(r.kicks),
                  all.ios ? static_cast<double>(r.kicks) / all.ios : 0.0, r.tool_cpu_s);
    text += line;
    if (!r.fixed_buffers.is_null()) {
        Json fixed = fixed_summary(r.fixed_buffers);
        std::snprintf(line, sizeof(line),
                      "io_uring fixed buffers: %llu fixed reads, %llu fixed writes, "
                      "%llu fallbacks %s\n",
                      fixed["fixed_reads"].get<unsigned long long>(),
                      fixed["fixed_writes"].get<unsigned long long>(),
                      fixed["fallbacks"].get<unsigned long long>(),
                      fixed["fallbacks_by_reason"].dump().c_str());
        text += line;
    }
    if (o.verify) {
        std::snprintf(line, sizeof(line), "verify: %llu bytes read back and checked, no error\n",
                      static_cast<unsigned long long>(r.verified_bytes));
        text += line;
    }
    return text;
}

} // namespace vblk
