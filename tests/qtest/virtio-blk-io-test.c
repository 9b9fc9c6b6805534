/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * virtio-blk with large and fragmented requests, on every host I/O path
 *
 * Each case runs against aio=threads, aio=native, aio=io_uring and
 * aio=io_uring with fixed buffers, with identical expectations: every
 * byte read back is what was written (a pattern derived from its disk
 * offset and a generation), and at the end the image file holds exactly
 * what the guest wrote.
 */

#include "qemu/osdep.h"
#include "qemu/bswap.h"
#include "qemu/cutils.h"
#include "qemu/units.h"
#include "qobject/qdict.h"
#include "qobject/qlist.h"
#include "qobject/qjson.h"
#include "standard-headers/linux/virtio_blk.h"
#include "standard-headers/linux/virtio_config.h"
#include "virtio-blk-helpers.h"

#define DISK_SIZE (128 * MiB)

typedef struct Backend {
    const char *name;
    const char *opts;       /* for -blockdev file */
    bool fixed;
} Backend;

static const Backend backends[] = {
    { "threads", "aio=threads,cache.direct=on" },
    { "native", "aio=native,cache.direct=on" },
    { "io_uring", "aio=io_uring,cache.direct=on" },
    { "io_uring-fixed", "aio=io_uring,cache.direct=on,aio-fixed-buffers=on",
      true },
};

typedef struct Case {
    const Backend *backend;
    const char *name;
    void (*run)(const Backend *b);
} Case;

/*
 * Start a guest with @ram_opts (memory options up to and including -m)
 * and a virtio-blk with @nvqs queues and @dev_opts, or with the JSON
 * -device @dev_opts when it starts with '{'.
 */
static VblkDev *start(const Backend *b, uint64_t ram, const char *ram_opts,
                      unsigned nvqs, const char *dev_opts)
{
    char *image = vblk_make_image(DISK_SIZE);
    char *loop = vblk_loop_attach(image);
    g_autofree char *dev = NULL;
    VblkDev *d;

    if (dev_opts[0] == '{') {
        dev = g_strdup_printf("'%s'", dev_opts);
    } else {
        dev = g_strdup_printf("virtio-blk-pci,id=vblk0,addr=04.0,"
                              "drive=disk0,num-queues=%u%s", nvqs, dev_opts);
    }
    /*
     * On a block device with 512-byte sectors, 512-byte requests reach the
     * backend as they are; a file makes file-posix pad them to 4 KiB.
     */
    d = vblk_start(ram, image, nvqs,
                   "-machine pc %s -object iothread,id=io0 "
                   "-object iothread,id=io1 "
                   "-blockdev %s,node-name=disk0,filename=%s,%s "
                   "-device %s", ram_opts, loop ? "host_device" : "file",
                   loop ?: image, b->opts, dev);
    d->loop = loop;
    return d;
}

static VblkDev *start_simple(const Backend *b)
{
    if (!vblk_have_hugepages(512 * MiB)) {
        return start(b, 512 * MiB, "-m 512M", 1, ",iothread=io0");
    }
    return start(b, 512 * MiB, "-m 512M -object memory-backend-memfd,"
                 "id=ram0,size=512M,hugetlb=on,hugetlbsize=2M "
                 "-machine memory-backend=ram0", 1, ",iothread=io0");
}

/* With fixed buffers, the fixed path must have carried data */
static void stop(const Backend *b, VblkDev *d)
{
    if (b->fixed) {
        QDict *info = vblk_fixed_info(d);
        QList *rings = qdict_get_qlist(info, "rings");
        QListEntry *e;
        int64_t fixed = 0;

        QLIST_FOREACH_ENTRY(rings, e) {
            QDict *ring = qobject_to(QDict, qlist_entry_obj(e));

            fixed += qdict_get_int(ring, "fixed-reads") +
                     qdict_get_int(ring, "fixed-writes");
        }
        if (!fixed) {
            g_autoptr(GString) json = qobject_to_json(QOBJECT(info));

            g_test_message("no fixed I/O: %s", json->str);
        }
        g_assert_cmpint(fixed, >, 0);
        qobject_unref(info);
    }
    vblk_stop(d);
}

/* --- large ------------------------------------------------------------ */

static void test_large(const Backend *b)
{
    static const uint64_t sizes[] = { MiB, 4 * MiB, 8 * MiB, 32 * MiB };
    VblkDev *d = start_simple(b);
    VblkSeg segs[1024];
    VblkIo io = { 0 };
    uint64_t offset = 0, seg_len;
    int i;

    for (i = 0; i < ARRAY_SIZE(sizes); i++) {
        io.segs = segs;
        io.nsegs = vblk_split(segs, d->data_start, sizes[i], 1);
        io.offset = offset;
        vblk_write_read(d, &io, 1, i * 3);
        offset += sizes[i];
    }

    /* The largest request: seg_max segments of 128 KiB */
    g_assert_cmpuint(d->seg_max, >=, 2);
    g_assert_cmpuint(d->seg_max, <=, ARRAY_SIZE(segs));
    seg_len = 128 * KiB;
    io.nsegs = vblk_split(segs, d->data_start, seg_len * d->seg_max,
                          d->seg_max);
    io.offset = offset;
    vblk_write_read(d, &io, 1, 77);
    stop(b, d);
}

/* --- fragmented ------------------------------------------------------- */

/* @n segments of @len bytes, @gap bytes apart, from @gpa */
static int spread(VblkSeg *segs, uint64_t gpa, int n, uint32_t len,
                  uint32_t gap)
{
    int i;

    for (i = 0; i < n; i++) {
        segs[i] = (VblkSeg) { gpa + (uint64_t)i * (len + gap), len };
    }
    return n;
}

static void test_fragmented(const Backend *b)
{
    static const uint32_t mixed[] = {
        512, 1536, 4096, 2560, 65536, 512, 3584, 131072, 1024, 7680,
    };
    VblkDev *d = start_simple(b);
    uint64_t base = d->data_start;
    VblkSeg s[6][1024];
    VblkIo ios[6] = { 0 };
    uint64_t gpa;
    int i, n = 0;

    /* seg_max segments of 512 bytes, each at an odd 512-byte offset */
    ios[n].segs = s[n];
    ios[n].nsegs = spread(s[n], base + 512, d->seg_max, 512, 1024);
    n++;
    /* Multiples of 512 that are not multiples of 4096 */
    ios[n].segs = s[n];
    ios[n].nsegs = spread(s[n], base + 4 * MiB + 1536, 100, 2560, 512);
    n++;
    /* Mixed sizes in one chain, at odd offsets */
    ios[n].segs = s[n];
    for (i = 0, gpa = base + 8 * MiB + 512; i < ARRAY_SIZE(mixed); i++) {
        s[n][i] = (VblkSeg) { gpa, mixed[i] };
        gpa += mixed[i] + 3 * 512;
    }
    ios[n].nsegs = ARRAY_SIZE(mixed);
    n++;
    /* Indirect tables of 2, 254 and 1000 entries */
    ios[n].segs = s[n];
    ios[n].nsegs = spread(s[n], base + 12 * MiB, 2, 4096, 0);
    ios[n++].indirect = true;
    ios[n].segs = s[n];
    ios[n].nsegs = spread(s[n], base + 16 * MiB + 512, 254, 1024, 512);
    ios[n++].indirect = true;
    ios[n].segs = s[n];
    ios[n].nsegs = spread(s[n], base + 20 * MiB + 3584, 1000, 512, 3584);
    ios[n++].indirect = true;

    /* Disjoint disk ranges; direct and indirect side by side in a batch */
    for (i = 0; i < n; i++) {
        ios[i].offset = i * 4 * MiB + (i % 2) * 512;
    }
    vblk_write_read(d, ios, n, 10);
    stop(b, d);
}

/* --- boundaries ------------------------------------------------------- */

/* Segments across every 2 MiB hugepage boundary of a 16 MiB range */
static void test_hugepage_boundary(const Backend *b)
{
    VblkDev *d;
    VblkSeg segs[8];
    VblkIo io = { .segs = segs };
    int i;

    if (!vblk_have_hugepages(512 * MiB)) {
        g_test_skip("cannot reserve 512 MiB of 2 MiB hugepages");
        return;
    }
    d = start_simple(b);
    for (i = 0; i < 8; i++) {
        segs[i] = (VblkSeg) { d->data_start + (i + 1) * 2 * MiB - 1536,
                              3072 + 512 * i };
    }
    io.nsegs = 8;
    io.offset = MiB;
    vblk_write_read(d, &io, 1, 40);
    /* One segment spanning four hugepages */
    segs[0] = (VblkSeg) { d->data_start + 20 * MiB - 512, 6 * MiB + 1024 };
    io.nsegs = 1;
    io.offset = 16 * MiB;
    vblk_write_read(d, &io, 1, 41);
    stop(b, d);
}

/*
 * Two NUMA nodes: 4 KiB pages below 128 MiB, hugepages above, two
 * RAMBlocks that are not adjacent in the host.  Segments across the
 * boundary, and a chain with pieces on both sides.
 */
static void test_ramblock_boundary(const Backend *b)
{
    VblkDev *d;
    VblkSeg segs[3];
    VblkIo io = { .segs = segs };

    if (!vblk_have_hugepages(128 * MiB)) {
        g_test_skip("cannot reserve 128 MiB of 2 MiB hugepages");
        return;
    }
    d = start(b, 256 * MiB, "-m 256M "
              "-object memory-backend-memfd,id=m0,size=128M "
              "-object memory-backend-memfd,id=m1,size=128M,hugetlb=on "
              "-numa node,memdev=m0 -numa node,memdev=m1", 1,
              ",iothread=io0");
    d->data_start = 64 * MiB;
    segs[0] = (VblkSeg) { 128 * MiB - 2560, 6144 };
    io.nsegs = 1;
    vblk_write_read(d, &io, 1, 50);
    segs[0] = (VblkSeg) { 128 * MiB - 4096, 4096 };
    segs[1] = (VblkSeg) { 100 * MiB + 512, 1024 };
    segs[2] = (VblkSeg) { 128 * MiB, 65536 };
    io.nsegs = 3;
    io.offset = MiB + 512;
    vblk_write_read(d, &io, 1, 51);
    /* And on each side alone */
    segs[0] = (VblkSeg) { 128 * MiB - 8192, 8192 };
    segs[1] = (VblkSeg) { 128 * MiB + 512, 8192 };
    io.nsegs = 1;
    io.offset = 2 * MiB;
    vblk_write_read(d, &io, 1, 52);
    io.segs = &segs[1];
    io.offset = 3 * MiB;
    vblk_write_read(d, &io, 1, 53);
    stop(b, d);
}

/* All of guest RAM is one 2 MiB hugepage */
static void test_single_hugepage(const Backend *b)
{
    VblkDev *d;
    VblkSeg segs[4];
    VblkIo io = { .segs = segs };

    if (!vblk_have_hugepages(2 * MiB)) {
        g_test_skip("cannot reserve a 2 MiB hugepage");
        return;
    }
    d = start(b, 2 * MiB, "-m 2M -object memory-backend-memfd,id=ram0,"
              "size=2M,hugetlb=on,hugetlbsize=2M "
              "-machine memory-backend=ram0", 1, ",iothread=io0");
    io.nsegs = spread(segs, d->data_start + 512, 4, 65536 + 512, 4096);
    io.offset = 4096;
    vblk_write_read(d, &io, 1, 60);
    stop(b, d);
}

/* --- many queues ------------------------------------------------------ */

/*
 * @nvqs queues of @depth entries, each filled with @depth requests at once
 * (one indirect descriptor each); the device completes them in any order.
 */
static void many_queues(const Backend *b, unsigned nvqs, unsigned depth,
                        uint32_t len, bool two_iothreads, bool raise_map_count)
{
    unsigned n = nvqs * depth, i;
    g_autofree VblkSeg *segs = g_new(VblkSeg, n);
    g_autofree VblkIo *ios = g_new0(VblkIo, n);
    g_autofree char *dev = NULL;
    VblkSeg all_seg;
    VblkIo all;
    VblkDev *d;
    int ooo;

    if (raise_map_count && !vblk_have_map_count(4 * n + 65536)) {
        g_test_skip("vm.max_map_count is too low for this many requests "
                    "in flight, and cannot be raised");
        return;
    }
    if (two_iothreads) {
        dev = g_strdup_printf("{\"driver\": \"virtio-blk-pci\", \"id\": "
                              "\"vblk0\", \"addr\": \"04.0\", \"drive\": "
                              "\"disk0\", \"num-queues\": %u, "
                              "\"queue-size\": %u, \"iothread-vq-mapping\": "
                              "[{\"iothread\": \"io0\"}, "
                              "{\"iothread\": \"io1\"}]}", nvqs, depth);
    } else {
        dev = g_strdup_printf(",queue-size=%u,iothread=io0", depth);
    }
    d = start(b, 512 * MiB, "-m 512M", nvqs, dev);
    g_assert_cmpuint((uint64_t)n * len, <=, d->ram_size - d->data_start);
    for (i = 0; i < n; i++) {
        segs[i] = (VblkSeg) { d->data_start + (uint64_t)i * len, len };
        ios[i] = (VblkIo) {
            .q = i % nvqs, .offset = (uint64_t)i * len,
            .segs = &segs[i], .nsegs = 1, .indirect = true,
        };
    }
    /*
     * Request i moves bytes [i * len, (i + 1) * len) of the disk from or to
     * the same offset in the data area: fill and check all in one go.
     */
    all_seg = (VblkSeg) { d->data_start, n * len };
    all = (VblkIo) { .segs = &all_seg, .nsegs = 1 };
    vblk_fill(d, &all, 90);
    for (i = 0; i < n; i++) {
        ios[i].type = VIRTIO_BLK_T_OUT;
    }
    ooo = vblk_run(d, ios, n);
    for (i = 0; i < n; i++) {
        g_assert_cmpint(ios[i].status, ==, VIRTIO_BLK_S_OK);
        ios[i].type = VIRTIO_BLK_T_IN;
    }
    vblk_poison(d, &all);
    ooo += vblk_run(d, ios, n);
    for (i = 0; i < n; i++) {
        g_assert_cmpint(ios[i].status, ==, VIRTIO_BLK_S_OK);
        g_assert_cmpuint(ios[i].used_len, ==, len + 1);
    }
    vblk_check(d, &all);
    g_test_message("%u queues x %u: %d completions out of order",
                   nvqs, depth, ooo);
    stop(b, d);
}

/*
 * 256 queues x 256 puts 65536 requests in the rings at once.  The device
 * keeps in flight only what coroutine stacks allow at the host's
 * vm.max_map_count (about 59 per queue at the default 65530), so the test
 * leaves the limit as it is: raising it would have QEMU map 65536 stacks.
 */
static void test_64_queues(const Backend *b)
{
    many_queues(b, 64, 256, 4096, false, true);
}

static void test_256_queues(const Backend *b)
{
    many_queues(b, 256, 256, 512, false, false);
}

static void test_64_queues_2_iothreads(const Backend *b)
{
    many_queues(b, 64, 256, 4096, true, true);
}

static void test_256_queues_2_iothreads(const Backend *b)
{
    many_queues(b, 256, 256, 512, true, false);
}

/*
 * One queue of 32768 entries, a request in every entry, all made
 * available at once, with vm.max_map_count as the host has it: every one
 * completes with the right data.  (This does not prove the limit of
 * requests in flight: QEMU completes these faster than it takes them, so
 * far fewer than 32768 are ever in flight; in-flight/limit proves it.)
 */
static void test_deep_queue(const Backend *b)
{
    g_autofree char *max_map_count = NULL;

    g_assert_true(g_file_get_contents("/proc/sys/vm/max_map_count",
                                      &max_map_count, NULL, NULL));
    g_test_message("vm.max_map_count %s", g_strstrip(max_map_count));
    many_queues(b, 1, 32768, 512, false, false);
}

/* --- large queues ----------------------------------------------------- */

/*
 * A queue of @size entries and requests of seg_max (@size - 2) segments,
 * as a chain that takes the whole queue and through an indirect table:
 * 512-byte segments 512 bytes apart (more than IOV_MAX pieces that cannot
 * be merged), then 1 KiB segments back to back (merged into one piece).
 */
static void large_queue(const Backend *b, unsigned size)
{
    g_autofree char *dev = g_strdup_printf(",queue-size=%u,iothread=io0",
                                           size);
    g_autofree VblkSeg *segs = g_new(VblkSeg, size);
    VblkDev *d = start(b, 512 * MiB, "-m 512M", 1, dev);
    VblkIo io = { .segs = segs };

    g_assert_cmpuint(d->seg_max, ==, size - 2);
    io.nsegs = spread(segs, d->data_start + 512, d->seg_max, 512, 512);
    vblk_write_read(d, &io, 1, 100);
    io.indirect = true;
    io.offset = 16 * MiB;
    vblk_write_read(d, &io, 1, 101);

    /*
     * Twice, 128 MiB apart in guest RAM: a 1 GiB registered-chunk boundary
     * (wherever the host put guest RAM) can cut one of them, which then
     * rightly goes the normal way, but not both.
     */
    io.nsegs = spread(segs, d->data_start, d->seg_max, 1024, 0);
    io.indirect = false;
    io.offset = 32 * MiB;
    vblk_write_read(d, &io, 1, 102);
    io.nsegs = spread(segs, d->data_start + 128 * MiB, d->seg_max, 1024, 0);
    io.offset = 64 * MiB;
    vblk_write_read(d, &io, 1, 103);
    stop(b, d);
}

static void test_queue_size_2048(const Backend *b)
{
    large_queue(b, 2048);
}

static void test_queue_size_32768(const Backend *b)
{
    large_queue(b, 32768);
}

/* --- oversized and aliased requests ---------------------------------- */

/* QEMU's peak resident memory, in bytes */
static uint64_t qemu_peak_rss(VblkDev *d)
{
    g_autofree char *path = g_strdup_printf("/proc/%d/status",
                                            (int)qtest_pid(d->qts));
    g_autofree char *status = NULL;
    const char *hwm;

    g_assert_true(g_file_get_contents(path, &status, NULL, NULL));
    hwm = strstr(status, "VmHWM:");
    g_assert_nonnull(hwm);
    return g_ascii_strtoull(hwm + strlen("VmHWM:"), NULL, 10) * KiB;
}

/* Host memory may grow by this much at most while a request is served */
#define RSS_SLACK (8 * MiB)

/*
 * Run @io alone; QEMU's peak RSS may grow by RSS_SLACK at most while the
 * device serves it (the test's own qtest traffic stays outside, as it
 * costs QEMU memory too).
 */
static void one_bounded(VblkDev *d, VblkIo *io, const char *what)
{
    uint64_t before = qemu_peak_rss(d), after;

    vblk_run(d, io, 1);
    after = qemu_peak_rss(d);
    g_test_message("%s of %d pieces: peak RSS %" PRIu64 " -> %" PRIu64
                   " MiB", what, io->nsegs, before / MiB, after / MiB);
    g_assert_cmpuint(after, <=, before + RSS_SLACK);
}

/*
 * Requests of more pieces than one host I/O takes, large and aliased:
 * host memory must not grow with their size.  A write of 1535 pieces of
 * 2 MiB that all point at the same guest memory (3 GiB, past the end of
 * the disk) gets IOERR, and a request of 1535 distinct 32 KiB pieces
 * (48 MiB, served as two host I/Os) is written and read back intact, with
 * QEMU's peak RSS growing by at most RSS_SLACK for each.
 */
static void test_oversized(const Backend *b)
{
    enum { PIECES = 1535 };
    VblkDev *d = start(b, 512 * MiB, "-m 512M", 1,
                       ",queue-size=2048,iothread=io0");
    g_autofree VblkSeg *segs = g_new(VblkSeg, PIECES);
    VblkIo io = { .type = VIRTIO_BLK_T_OUT, .segs = segs, .nsegs = PIECES };
    int i;

    for (i = 0; i < PIECES; i++) {
        segs[i] = (VblkSeg) { d->data_start, 2 * MiB };
    }
    qtest_memset(d->qts, d->data_start, 0x5a, 2 * MiB);
    one_bounded(d, &io, "aliased 3 GiB write");
    g_assert_cmpint(io.status, ==, VIRTIO_BLK_S_IOERR);

    /* 32 KiB pieces 64 KiB apart: none can be merged */
    io.nsegs = spread(segs, d->data_start, PIECES, 32 * KiB, 32 * KiB);
    vblk_fill(d, &io, 120);
    one_bounded(d, &io, "48 MiB write");
    g_assert_cmpint(io.status, ==, VIRTIO_BLK_S_OK);
    io.type = VIRTIO_BLK_T_IN;
    vblk_poison(d, &io);
    one_bounded(d, &io, "48 MiB read");
    g_assert_cmpint(io.status, ==, VIRTIO_BLK_S_OK);
    vblk_check(d, &io);
    stop(b, d);
}

/* The most queues QEMU supports: the last one works like the first */
static void test_1024_queues(const Backend *b)
{
    VblkDev *d = start(b, 512 * MiB, "-m 512M", 1024, ",iothread=io0");
    VblkSeg seg = { d->data_start, 64 * KiB };
    VblkIo io = { .q = 1023, .segs = &seg, .nsegs = 1, .offset = MiB };

    vblk_write_read(d, &io, 1, 110);
    io = (VblkIo) { .q = 0, .segs = &seg, .nsegs = 1, .offset = 2 * MiB };
    vblk_write_read(d, &io, 1, 111);
    stop(b, d);
}

/* One queue too many is a configuration error, not an abort */
static void test_1025_queues(void)
{
    const char *qemu = g_getenv("QTEST_QEMU_BINARY");
    const char *argv[] = {
        qemu, "-machine", "pc", "-nodefaults", "-display", "none",
        "-blockdev", "null-co,node-name=disk0",
        "-device", "virtio-blk-pci,drive=disk0,num-queues=1025", NULL,
    };
    g_autofree char *err = NULL;
    g_autoptr(GError) error = NULL;
    int status;

    g_assert_nonnull(qemu);
    g_assert_true(g_spawn_sync(NULL, (char **)argv, NULL, 0, NULL, NULL,
                               NULL, &err, &status, &error));
    g_assert_true(WIFEXITED(status));
    g_assert_cmpint(WEXITSTATUS(status), !=, 0);
    g_assert_nonnull(strstr(err, "invalid num-queues property (1025), "
                                 "must be at most 1024"));
}

/* --- requests in flight across reset and stop ----------------------- */

#define INFLIGHT_QUEUES 4
#define INFLIGHT_DEPTH 16

/* A throttle group holds requests back so that they are in flight */
static VblkDev *start_throttled(const Backend *b, unsigned nvqs,
                                unsigned iops, const char *dev_opts)
{
    char *image = vblk_make_image(DISK_SIZE);

    return vblk_start(512 * MiB, image, nvqs,
                      "-machine pc -m 512M -name debug-threads=on "
                      "-object iothread,id=io0 "
                      "-object throttle-group,id=tg0,x-iops-total=%u "
                      "-blockdev file,node-name=file0,filename=%s,%s "
                      "-blockdev throttle,node-name=disk0,"
                      "throttle-group=tg0,file=file0 "
                      "-device virtio-blk-pci,id=vblk0,addr=04.0,"
                      "drive=disk0,num-queues=%u,iothread=io0%s",
                      iops, image, b->opts, nvqs, dev_opts);
}

/*
 * Reset the device after writes @ios were interrupted, read every one back
 * into poisoned buffers, check it, and stop (checking the image).
 */
static void reset_and_read_back(VblkDev *d, VblkIo *ios, int n)
{
    int i;

    vblk_reset(d);
    for (i = 0; i < n; i++) {
        ios[i].type = VIRTIO_BLK_T_IN;
        vblk_poison(d, &ios[i]);
    }
    vblk_run(d, ios, n);
    for (i = 0; i < n; i++) {
        g_assert_cmpint(ios[i].status, ==, VIRTIO_BLK_S_OK);
        vblk_check(d, &ios[i]);
    }
    vblk_stop(d);
}

/*
 * Writes on every queue, some still in flight when @interrupt runs; after
 * it and a reset every write must be on disk: read all back and check.
 */
static void in_flight(const Backend *b, void (*interrupt)(VblkDev *d))
{
    enum { N = INFLIGHT_QUEUES * INFLIGHT_DEPTH };
    VblkDev *d = start_throttled(b, INFLIGHT_QUEUES, 40, "");
    VblkSeg segs[N];
    VblkIo ios[N];
    int i, finished;

    for (i = 0; i < N; i++) {
        segs[i] = (VblkSeg) { d->data_start + i * 8 * KiB, 4 * KiB };
        ios[i] = (VblkIo) {
            .q = i % INFLIGHT_QUEUES, .type = VIRTIO_BLK_T_OUT,
            .offset = i * 4 * KiB, .segs = &segs[i], .nsegs = 1,
        };
        vblk_fill(d, &ios[i], 120 + i);
    }
    finished = vblk_run_for(d, ios, N, 200 * 1000);
    g_test_message("%d of %d writes done before the interruption",
                   finished, N);
    g_assert_cmpint(finished, <, N);

    interrupt(d);
    reset_and_read_back(d, ios, N);
}

static void no_interruption(VblkDev *d)
{
}

static void stop_and_resume(VblkDev *d)
{
    qtest_qmp_assert_success(d->qts, "{'execute': 'stop'}");
    qtest_qmp_assert_success(d->qts, "{'execute': 'cont'}");
}

/* Queue @q's requests taken from the ring and not completed yet */
static uint32_t vq_in_use(VblkDev *d, unsigned q, uint16_t *used_idx)
{
    QDict *rsp = qtest_qmp(d->qts, "{'execute': 'x-query-virtio-queue-status',"
                           " 'arguments': {'path': "
                           "'/machine/peripheral/vblk0/virtio-backend',"
                           " 'queue': %u}}", q);
    QDict *ret = qdict_get_qdict(rsp, "return");
    uint32_t inuse;

    g_assert_nonnull(ret);
    inuse = qdict_get_int(ret, "inuse");
    *used_idx = qdict_get_int(ret, "used-idx");
    qobject_unref(rsp);
    return inuse;
}

static uint32_t queue_in_use(VblkDev *d, uint16_t *used_idx)
{
    return vq_in_use(d, 0, used_idx);
}

/*
 * Make @n writes available at once on queue 0, one indirect descriptor
 * each so that all fit in the ring, 4 KiB apart in guest RAM and 8 KiB
 * apart on disk (never merged), and return while most are still waiting.
 */
static void held_writes(VblkDev *d, VblkSeg *segs, VblkIo *ios, int n,
                        unsigned gen)
{
    int i;

    for (i = 0; i < n; i++) {
        segs[i] = (VblkSeg) { d->data_start + i * 4 * KiB, 4 * KiB };
        ios[i] = (VblkIo) {
            .type = VIRTIO_BLK_T_OUT, .offset = i * 8 * KiB,
            .segs = &segs[i], .nsegs = 1, .indirect = true,
        };
        vblk_fill(d, &ios[i], gen + i);
    }
    g_assert_cmpint(vblk_run_for(d, ios, n, 50 * 1000), <, n);
}

/*
 * Wait until queue 0 has used @n requests, checking that it never has
 * more than @limit in flight; returns the most it had.
 */
static uint32_t wait_all_used(VblkDev *d, uint16_t n, uint32_t limit)
{
    gint64 deadline = g_get_monotonic_time() + VBLK_TIMEOUT_US;
    uint32_t inuse, most = 0;
    uint16_t used_idx;

    do {
        g_assert(g_get_monotonic_time() < deadline);
        inuse = queue_in_use(d, &used_idx);
        g_assert_cmpuint(inuse, <=, limit);
        most = MAX(most, inuse);
        g_usleep(5 * 1000);
    } while (used_idx != n);
    return most;
}

/*
 * Long chains: reads of LONG_PIECES pieces of 4 KiB each (16 MiB, pieces
 * 8 KiB apart so that none merge, served as four host I/Os each), one
 * indirect descriptor each, on a queue of 32768 entries over a backend
 * that takes 200 ms per request.
 */
#define LONG_PIECES 4096
#define LONG_STATE ((LONG_PIECES + 2) * 40)   /* host bytes per request */

static VblkDev *long_start(const char *dev_opts)
{
    return vblk_start(512 * MiB, NULL, 1,
                      "-machine pc -m 512M -object iothread,id=io0 "
                      "-blockdev null-co,node-name=disk0,size=67108864,"
                      "read-zeroes=off,latency-ns=200000000 "
                      "-device virtio-blk-pci,id=vblk0,addr=04.0,"
                      "drive=disk0,iothread=io0,queue-size=32768%s",
                      dev_opts);
}

/*
 * Make @n long reads available at once and wait for all, never more than
 * @limit in flight; returns the most that were
 */
static uint32_t long_reads(VblkDev *d, int n, uint32_t limit)
{
    const uint64_t hdr = d->data_start, status = d->data_start + 64;
    const uint64_t table = d->data_start + 4096;
    g_autofree struct vring_desc *t = g_new(struct vring_desc,
                                            LONG_PIECES + 2);
    g_autofree struct vring_desc *descs = g_new(struct vring_desc, n);
    g_autofree uint16_t *heads = g_new(uint16_t, n);
    g_autofree struct vring_used_elem *used =
        g_new(struct vring_used_elem, n);
    struct virtio_blk_outhdr h = { .type = cpu_to_le32(VIRTIO_BLK_T_IN) };
    uint32_t most;
    bool reset;
    int i;

    /* One indirect table for all: header, the pieces, status */
    qtest_memwrite(d->qts, hdr, &h, sizeof(h));
    t[0] = vblk_desc(hdr, 16, VRING_DESC_F_NEXT, 1);
    for (i = 1; i <= LONG_PIECES; i++) {
        t[i] = vblk_desc(d->data_start + 1 * MiB + (i - 1) * 8 * KiB,
                         4 * KiB, VRING_DESC_F_WRITE | VRING_DESC_F_NEXT,
                         i + 1);
    }
    t[i] = vblk_desc(status, 1, VRING_DESC_F_WRITE, 0);
    qtest_memwrite(d->qts, table, t, (LONG_PIECES + 2) * sizeof(t[0]));
    for (i = 0; i < n; i++) {
        descs[i] = vblk_desc(table, (LONG_PIECES + 2) * sizeof(t[0]),
                             VRING_DESC_F_INDIRECT, 0);
        heads[i] = i;
    }

    vblk_raw_submit(d, 0, descs, n, heads, n);
    most = wait_all_used(d, n, limit);
    g_assert_cmpint(vblk_raw_collect(d, 0, n, used, &reset), ==, n);
    g_assert_false(reset);
    for (i = 0; i < n; i++) {
        g_assert_cmpuint(used[i].len, ==, LONG_PIECES * 4 * KiB + 1);
    }
    g_assert_cmpint(qtest_readb(d->qts, status), ==, VIRTIO_BLK_S_OK);
    return most;
}

static void long_stop(VblkDev *d)
{
    vblk_quit(d);
    g_free(d->shadow);
    g_free(d);
}

/*
 * One queue of long chains may hold only x-max-sg-memory of host memory
 * for their scatter-gather state (about 40 bytes per piece): 4096 long
 * reads made available at once all complete, the queue never has more in
 * flight than the bound lets it (plus one chain), and QEMU's peak RSS
 * grows by the bound and little more.  Without the bound all 4096 were in
 * flight at once, holding some 660 MiB.
 */
static void test_long_chains_memory(gconstpointer data)
{
    uint64_t bound = GPOINTER_TO_SIZE(data);
    g_autofree char *dev_bound = bound ?
        g_strdup_printf(",x-max-sg-memory=%" PRIu64, bound) : g_strdup("");
    VblkDev *d = long_start(dev_bound);
    uint64_t rss0, rss1;
    uint32_t most, limit;

    bound = bound ?: 64 * MiB;          /* the default */
    limit = bound / LONG_STATE + 1;
    rss0 = qemu_peak_rss(d);
    most = long_reads(d, 4096, limit);
    rss1 = qemu_peak_rss(d);
    g_test_message("bound %" PRIu64 " MiB: at most %u in flight (limit %u);"
                   " peak RSS %" PRIu64 " -> %" PRIu64 " MiB", bound / MiB,
                   most, limit, rss0 / MiB, rss1 / MiB);
    /* The bound is used, not just respected */
    g_assert_cmpuint(most, >=, limit / 2);
    /* Coroutine stacks, pool objects and the qtest traffic: 32 MiB */
    g_assert_cmpuint(rss1, <=, rss0 + bound + 32 * MiB);
    long_stop(d);
}

/*
 * A long chain served as four host I/Os runs four coroutines, and counts
 * as four requests against the queue's limit: with x-max-in-flight=8, two
 * such reads are in flight at most (eight before).
 */
static void test_long_chains_parts(void)
{
    VblkDev *d = long_start(",x-max-in-flight=8");
    uint32_t most = long_reads(d, 64, 2);

    g_test_message("at most %u long reads in flight", most);
    long_stop(d);
}

/* --- the coroutine pool after a failed hot-plug ---------------------- */

/* How many memory mappings QEMU has */
static unsigned qemu_mappings(VblkDev *d)
{
    g_autofree char *path = g_strdup_printf("/proc/%d/maps",
                                            (int)qtest_pid(d->qts));
    g_autofree char *maps = NULL;
    unsigned n = 0;
    const char *p;

    g_assert_true(g_file_get_contents(path, &maps, NULL, NULL));
    for (p = maps; (p = strchr(p, '\n')); p++) {
        n++;
    }
    return n;
}

/*
 * A virtio-blk device grows the coroutine pool by half its queue entries
 * while it exists.  A hot-plug that fails (an IOThread that does not
 * exist in iothread-vq-mapping) must give back what it added: after
 * NQ x QUEUE reads of 200 ms were in flight at once, a full ring on each
 * of NQ queues, the pool keeps no more coroutines (two mappings each, a
 * stack and its guard page) than the default 128, the device's
 * NQ x QUEUE / 2, a batch of 128 over that and two batches in the
 * IOThread (4607), with room for 512 more for other mappings the burst
 * may leave (malloc's).  Ours kept 4480; before the fix ours kept 8191 and
 * stock 10.2.2 8192, all of them: the failed device's 16 x 1024 / 2
 * stayed in the pool size.
 */
static void test_coroutine_pool_failed_plug(void)
{
    enum {
        NQ = 8, QUEUE = 1024, N = NQ * QUEUE,
        POOL_MAX = 128 + N / 2 + 3 * 128 + 512,
    };
    VblkDev *d = vblk_start(512 * MiB, NULL, NQ,
                            "-machine pc -m 512M -object iothread,id=io0 "
                            "-blockdev null-co,node-name=disk0,"
                            "size=67108864,latency-ns=200000000 "
                            "-blockdev null-co,node-name=spare "
                            "-device virtio-blk-pci,id=vblk0,addr=04.0,"
                            "drive=disk0,iothread=io0,num-queues=%u,"
                            "queue-size=%u", NQ, QUEUE);
    const uint64_t hdr = d->data_start, status = d->data_start + 64;
    const uint64_t table = d->data_start + 8192;
    g_autofree struct vring_desc *descs = g_new(struct vring_desc, QUEUE);
    g_autofree uint16_t *heads = g_new(uint16_t, QUEUE);
    g_autofree struct vring_used_elem *used =
        g_new(struct vring_used_elem, QUEUE);
    struct virtio_blk_outhdr h = { .type = cpu_to_le32(VIRTIO_BLK_T_IN) };
    struct vring_desc t[3];
    unsigned before, after, kept, prev, q;
    QDict *rsp;
    bool reset;
    int i;

    rsp = qtest_qmp(d->qts, "{'execute': 'device_add', 'arguments': {"
                    "'driver': 'virtio-blk-pci', 'id': 'vblk1', "
                    "'drive': 'spare', 'num-queues': 16, "
                    "'queue-size': 1024, 'iothread-vq-mapping': "
                    "[{'iothread': 'no-such-iothread'}]}}");
    g_assert_true(qdict_haskey(rsp, "error"));
    qobject_unref(rsp);

    /* Reads of 4 KiB, all through one indirect table */
    qtest_memwrite(d->qts, hdr, &h, sizeof(h));
    t[0] = vblk_desc(hdr, 16, VRING_DESC_F_NEXT, 1);
    t[1] = vblk_desc(d->data_start + 4096, 4096,
                     VRING_DESC_F_WRITE | VRING_DESC_F_NEXT, 2);
    t[2] = vblk_desc(status, 1, VRING_DESC_F_WRITE, 0);
    qtest_memwrite(d->qts, table, t, sizeof(t));
    for (i = 0; i < QUEUE; i++) {
        descs[i] = vblk_desc(table, sizeof(t), VRING_DESC_F_INDIRECT, 0);
        heads[i] = i;
    }

    before = qemu_mappings(d);
    for (q = 0; q < NQ; q++) {
        vblk_raw_submit(d, q, descs, QUEUE, heads, QUEUE);
    }
    for (q = 0; q < NQ; q++) {
        g_assert_cmpint(vblk_raw_collect(d, q, QUEUE, used, &reset), ==,
                        QUEUE);
        g_assert_false(reset);
    }
    /* The last coroutines go back to the pool just after their completion */
    after = qemu_mappings(d);
    do {
        prev = after;
        g_usleep(50 * 1000);
        after = qemu_mappings(d);
    } while (after != prev);
    kept = after > before ? (after - before) / 2 : 0;
    g_test_message("%u coroutines kept after %u requests in flight "
                   "(at most %u)", kept, N, POOL_MAX);
    g_assert_cmpuint(kept, <=, POOL_MAX);
    long_stop(d);
}

/*
 * A queue may only have so many requests in flight (x-max-in-flight here;
 * by default what coroutine stacks allow): with @n writes made available
 * at once and held back by a throttle group, the device never takes more
 * than @limit from the ring, takes the rest as writes complete, and all
 * of them reach the disk.  A limit of 1 is one, not two (it used to be
 * raised to 2 without a word).
 */
static void in_flight_limit(const Backend *b, uint32_t limit, uint16_t n)
{
    g_autofree char *opts = g_strdup_printf(",queue-size=1024,"
                                            "x-max-in-flight=%u", limit);
    VblkDev *d = start_throttled(b, 1, 1000, opts);
    g_autofree VblkSeg *segs = g_new(VblkSeg, n);
    g_autofree VblkIo *ios = g_new0(VblkIo, n);
    uint32_t most;

    held_writes(d, segs, ios, n, 130);
    most = wait_all_used(d, n, limit);
    g_test_message("at most %u of %u requests in flight", most, n);
    g_assert_cmpuint(most, >, limit / 2);

    reset_and_read_back(d, ios, n);
}

static void test_in_flight_limit(const Backend *b)
{
    in_flight_limit(b, 64, 512);
}

static void test_in_flight_limit_one(const Backend *b)
{
    in_flight_limit(b, 1, 256);
}

/* How long QEMU's thread named @comm has run, in ns (its schedstat) */
static uint64_t thread_run_ns(VblkDev *d, const char *comm)
{
    g_autofree char *dir = g_strdup_printf("/proc/%d/task",
                                           (int)qtest_pid(d->qts));
    GDir *tasks = g_dir_open(dir, 0, NULL);
    const char *tid;
    uint64_t ns = 0;
    bool found = false;

    g_assert_nonnull(tasks);
    while ((tid = g_dir_read_name(tasks))) {
        g_autofree char *path = g_strdup_printf("%s/%s/comm", dir, tid);
        g_autofree char *name = NULL;
        g_autofree char *stat = NULL;

        if (!g_file_get_contents(path, &name, NULL, NULL) ||
            strcmp(g_strstrip(name), comm)) {
            continue;
        }
        g_free(path);
        path = g_strdup_printf("%s/%s/schedstat", dir, tid);
        g_assert_true(g_file_get_contents(path, &stat, NULL, NULL));
        ns = g_ascii_strtoull(stat, NULL, 10);
        found = true;
    }
    g_dir_close(tasks);
    g_assert_true(found);
    return ns;
}

/*
 * A queue at its limit sleeps until completions make room.  null-co
 * completes each request after 10 ms, the queue may have 16 in flight
 * and 512 wait in the ring: while it serves them, the device's IOThread
 * must spend no more than MAX_US_PER_REQ of CPU per request.  When a
 * queue at its limit still looked ready to the event loop's polling, the
 * IOThread polled it over and over between completions (137 us per
 * request against 15 us without the limit, in the report that found it).
 */
#define MAX_US_PER_REQ 60

static void test_in_flight_idle(void)
{
    enum { N = 512, LIMIT = 16 };
    VblkDev *d = vblk_start(512 * MiB, vblk_make_image(16 * MiB), 1,
                            "-machine pc -m 512M -name debug-threads=on "
                            "-object iothread,id=io0 "
                            "-blockdev null-co,node-name=disk0,"
                            "latency-ns=10000000 "
                            "-device virtio-blk-pci,id=vblk0,addr=04.0,"
                            "drive=disk0,iothread=io0,queue-size=1024,"
                            "x-max-in-flight=%d", LIMIT);
    g_autofree VblkSeg *segs = g_new(VblkSeg, N);
    g_autofree VblkIo *ios = g_new0(VblkIo, N);
    uint64_t ns0, ns1, per_req;
    uint16_t used0, used1;

    held_writes(d, segs, ios, N, 140);
    queue_in_use(d, &used0);
    ns0 = thread_run_ns(d, "IO io0");
    g_usleep(1000 * 1000);
    ns1 = thread_run_ns(d, "IO io0");
    queue_in_use(d, &used1);
    g_assert_cmpuint(used1 - used0, >, 100);
    per_req = (ns1 - ns0) / 1000 / (uint16_t)(used1 - used0);
    g_test_message("IOThread CPU at the limit: %" PRIu64 " us per request "
                   "(%u requests)", per_req, (uint16_t)(used1 - used0));
    g_assert_cmpuint(per_req, <=, MAX_US_PER_REQ);
    wait_all_used(d, N, LIMIT);

    /* null-co keeps nothing: no image to check */
    vblk_quit(d);
    unlink(d->image);
    g_free(d->image);
    g_free(d->shadow);
    g_free(d);
}

/*
 * The budget of requests in flight is one for the whole process: with
 * @ndevs devices of 64 queues each, a queue of ours keeps at most its
 * equal share of half the coroutine stacks the host allows, however many
 * other devices there are (each device used to take half for itself),
 * and whatever limit of their own the others have (@others_opts: one
 * that lowers their share still counts them; before, they were left out
 * of the budget, and ours took eight times its share).
 */
static void in_flight_budget(const Backend *b, int ndevs,
                             const char *others_opts)
{
    enum { N = 512, Q = 64 };
    g_autofree char *max_map_count = NULL;
    g_autoptr(GString) others = g_string_new("");
    g_autofree char *dev_opts = NULL;
    g_autofree VblkSeg *segs = g_new(VblkSeg, N);
    g_autofree VblkIo *ios = g_new0(VblkIo, N);
    unsigned long stacks, share;
    long map_count;
    uint32_t most;
    VblkDev *d;
    int i;

    g_assert_true(g_file_get_contents("/proc/sys/vm/max_map_count",
                                      &max_map_count, NULL, NULL));
    g_assert_cmpint(qemu_strtol(g_strstrip(max_map_count), NULL, 10,
                                &map_count), ==, 0);
    stacks = MAX(map_count - 5000, 0) / 2;
    share = MAX(stacks / 2 / (ndevs * Q), 16);
    g_assert_cmpuint(share, <, N);
    for (i = 1; i < ndevs; i++) {
        g_string_append_printf(others, " -blockdev null-co,node-name=null%d"
                               " -device virtio-blk-pci,addr=%02x.0,"
                               "drive=null%d,num-queues=%d,iothread=io0%s",
                               i, 4 + i, i, Q, others_opts);
    }
    dev_opts = g_strdup_printf(",queue-size=1024%s", others->str);
    d = start_throttled(b, Q, 500, dev_opts);
    held_writes(d, segs, ios, N, 150);
    most = wait_all_used(d, N, share);
    g_test_message("%d devices x %d queues: at most %u in flight, share %lu",
                   ndevs, Q, most, share);
    g_assert_cmpuint(most, >, share / 2);
    reset_and_read_back(d, ios, N);
}

static void test_in_flight_budget_2(const Backend *b)
{
    in_flight_budget(b, 2, "");
}

static void test_in_flight_budget_limited(const Backend *b)
{
    in_flight_budget(b, 8, ",x-max-in-flight=8");
}

static void test_in_flight_budget_8(const Backend *b)
{
    in_flight_budget(b, 8, "");
}

/* Reset while requests are in flight (vblk_reset() follows anyway) */
static void test_in_flight_reset(const Backend *b)
{
    in_flight(b, no_interruption);
}

static void test_in_flight_stop(const Backend *b)
{
    in_flight(b, stop_and_resume);
}

/* --- errors ----------------------------------------------------------- */

static uint8_t one(VblkDev *d, uint32_t type, uint64_t offset,
                   const VblkSeg *segs, int nsegs)
{
    VblkIo io = {
        .type = type, .offset = offset, .segs = segs, .nsegs = nsegs,
    };

    vblk_run(d, &io, 1);
    return io.status;
}

/*
 * Requests the device must refuse, one by one, with QEMU alive after each;
 * then a reset, and the device works again.  The final image check proves
 * nothing refused was written.
 */
static void test_errors(const Backend *b)
{
    VblkDev *d = start_simple(b);
    VblkSeg seg = { d->data_start, 4096 };
    VblkSeg empty = { d->data_start, 0 };
    VblkIo io;

    /* Past the end: IOERR, for a write that starts inside, too */
    qtest_memset(d->qts, seg.gpa, 0x5a, seg.len);
    g_assert_cmpint(one(d, VIRTIO_BLK_T_OUT, d->capacity - 512, &seg, 1), ==,
                    VIRTIO_BLK_S_IOERR);
    g_assert_cmpint(one(d, VIRTIO_BLK_T_IN, d->capacity, &seg, 1), ==,
                    VIRTIO_BLK_S_IOERR);
    g_assert_cmpint(one(d, VIRTIO_BLK_T_OUT, UINT64_MAX & ~511ull, &seg, 1),
                    ==, VIRTIO_BLK_S_IOERR);

    /* Types the device does not do */
    g_assert_cmpint(one(d, VIRTIO_BLK_T_SECURE_ERASE, 0, &seg, 1), ==,
                    VIRTIO_BLK_S_UNSUPP);
    g_assert_cmpint(one(d, 0x77, 0, &seg, 1), ==, VIRTIO_BLK_S_UNSUPP);

    /* Alive and well; after a reset too */
    g_assert_false(vblk_device_status(d) & VIRTIO_CONFIG_S_NEEDS_RESET);
    vblk_write_pattern(d, 0, 0, &seg, 1, 5);
    vblk_reset(d);
    vblk_read_verify(d, 0, 0, &seg, 1);

    /*
     * A zero-length data descriptor is a malformed chain: the device
     * stops with NEEDS_RESET (virtio_error) rather than guess; after a
     * reset it serves requests again.
     */
    io = (VblkIo) { .type = VIRTIO_BLK_T_OUT, .segs = &empty, .nsegs = 1 };
    vblk_run_expect_reset(d, &io);
    vblk_read_verify(d, 0, 0, &seg, 1);
    io = (VblkIo) { .type = VIRTIO_BLK_T_IN, .segs = &empty, .nsegs = 1 };
    vblk_run_expect_reset(d, &io);
    vblk_write_pattern(d, 0, 8192, &seg, 1, 6);
    vblk_read_verify(d, 0, 8192, &seg, 1);
    stop(b, d);
}

static const struct {
    const char *name;
    void (*run)(const Backend *b);
} cases[] = {
    { "large", test_large },
    { "fragmented", test_fragmented },
    { "boundary/hugepage", test_hugepage_boundary },
    { "boundary/ramblock", test_ramblock_boundary },
    { "boundary/single-hugepage", test_single_hugepage },
    { "queues/64", test_64_queues },
    { "queues/256", test_256_queues },
    { "queues/64-2-iothreads", test_64_queues_2_iothreads },
    { "queues/256-2-iothreads", test_256_queues_2_iothreads },
    { "queue-size/2048", test_queue_size_2048 },
    { "queue-size/32768", test_queue_size_32768 },
    { "oversized", test_oversized },
    { "queues/1024", test_1024_queues },
    { "queues/1-32768-deep", test_deep_queue },
    { "in-flight/reset", test_in_flight_reset },
    { "in-flight/stop", test_in_flight_stop },
    { "in-flight/limit", test_in_flight_limit },
    { "in-flight/limit-1", test_in_flight_limit_one },
    { "in-flight/budget-2-devices", test_in_flight_budget_2 },
    { "in-flight/budget-8-devices", test_in_flight_budget_8 },
    { "in-flight/budget-8-devices-limited", test_in_flight_budget_limited },
    { "errors", test_errors },
};

/* Threads of QEMU named iou-wrk-*: the kernel's io-wq workers */
static unsigned io_wq_workers(VblkDev *d)
{
    g_autofree char *dir = g_strdup_printf("/proc/%d/task",
                                           (int)qtest_pid(d->qts));
    GDir *tasks = g_dir_open(dir, 0, NULL);
    const char *tid;
    unsigned n = 0;

    g_assert_nonnull(tasks);
    while ((tid = g_dir_read_name(tasks))) {
        g_autofree char *path = g_strdup_printf("%s/%s/comm", dir, tid);
        g_autofree char *name = NULL;

        if (g_file_get_contents(path, &name, NULL, NULL) &&
            g_str_has_prefix(name, "iou-wrk")) {
            n++;
        }
    }
    g_dir_close(tasks);
    return n;
}

/*
 * A blk-mq device takes as many requests at once as it has tags (a loop
 * device: 128).  io_uring hands every request beyond that to an io-wq
 * thread that sleeps until a tag is free, so aio=io_uring keeps the rest
 * waiting in QEMU instead, by default (the device's own depth): 4 queues
 * of 256 writes, then reads, all in flight at once on a loop device,
 * start no io-wq worker, and every byte reads back.  With
 * aio-max-in-flight=0 (no limit) the same load starts workers, as it
 * does on stock QEMU, which has no such option (scripts/tests.d/
 * stock-defaults runs the default case on it too): the control that the
 * test sees them.
 */

/* Whether QEMU knows aio-max-in-flight: stock QEMU does not */
static bool has_depth_limit(QTestState *qts)
{
    QDict *rsp = qtest_qmp(qts, "{'execute': 'query-qmp-schema'}");
    g_autoptr(GString) json = qobject_to_json(qdict_get(rsp, "return"));
    bool has = strstr(json->str, "\"aio-max-in-flight\"");

    qobject_unref(rsp);
    return has;
}

static void test_device_depth(gconstpointer data)
{
    const char *limit = data;
    enum { NVQS = 4, DEPTH = 256, N = NVQS * DEPTH, ROUNDS = 8 };
    char *image = vblk_make_image(DISK_SIZE);
    char *loop = vblk_loop_attach(image);
    g_autofree VblkSeg *segs = g_new(VblkSeg, N);
    g_autofree VblkIo *ios = g_new(VblkIo, N);
    unsigned round, workers;
    VblkDev *d;
    int i;

    if (!loop) {
        g_test_skip("no loop device (losetup needs root)");
        unlink(image);
        g_free(image);
        return;
    }
    d = vblk_start(512 * MiB, image, NVQS,
                   "-machine pc -m 512M -object iothread,id=io0 "
                   "-blockdev host_device,node-name=disk0,filename=%s,"
                   "aio=io_uring,cache.direct=on%s "
                   "-device virtio-blk-pci,id=vblk0,addr=04.0,drive=disk0,"
                   "num-queues=%d,queue-size=%d,iothread=io0",
                   loop, limit, NVQS, DEPTH);
    d->loop = loop;
    for (i = 0; i < N; i++) {
        segs[i] = (VblkSeg) { d->data_start + i * 4 * KiB, 4 * KiB };
        ios[i] = (VblkIo) {
            .q = i % NVQS, .offset = (i * 7919 % (DISK_SIZE / (4 * KiB))) *
                                     4 * KiB,
            .segs = &segs[i], .nsegs = 1, .indirect = true,
        };
    }
    for (round = 0; round < ROUNDS; round++) {
        vblk_write_read(d, ios, N, round * N);
    }
    /* Idle workers stay for seconds: they are all still there */
    workers = io_wq_workers(d);
    g_test_message("io-wq workers after %d rounds of %d requests: %u",
                   ROUNDS, N, workers);
    if (!*limit && has_depth_limit(d->qts)) {
        g_assert_cmpuint(workers, ==, 0);
    } else {
        g_assert_cmpuint(workers, >, 0);
    }
    vblk_stop(d);
}

typedef struct BackendDepthCase {
    const char *max_in_flight;
    int nvqs;
} BackendDepthCase;

/*
 * The device takes from its queues no more than it keeps the backend
 * busy with: twice the requests the backend takes at once (here
 * aio-max-in-flight=16 of file-posix, seen through a throttle filter),
 * shared by the queues, where each queue may always take its equal part
 * of that, at least one (so at most twice as many in the worst case).
 * Beyond that, requests wait in the rings.  4 or 16 queues of 512 writes
 * in all, held back by the throttle group: the device never has more
 * than 64 taken at once, and every write reaches the disk.
 * aio-max-in-flight=0 (no limit) is the control: there the device takes
 * far more.
 *
 * While a queue waits for room, the device wakes it itself, so it keeps
 * the guest from notifying it (VRING_USED_F_NO_NOTIFY stays set): seen
 * as a queue with requests left in its ring, it almost always asks for
 * no notification.  (A queue that just got its turn may not have run
 * yet, hence "almost".)
 */
static void test_backend_depth(gconstpointer data)
{
    const BackendDepthCase *c = data;
    const char *max_in_flight = c->max_in_flight;
    const int NVQS = c->nvqs;
    enum { N = 512, BACKEND = 16 };
    g_autofree char *opts = g_strdup_printf("aio=io_uring,cache.direct=on,"
                                            "aio-max-in-flight=%s",
                                            max_in_flight);
    const Backend b = { "io_uring", opts };
    VblkDev *d = start_throttled(&b, NVQS, 2000, ",queue-size=256");
    bool limited = strcmp(max_in_flight, "0");
    g_autofree VblkSeg *segs = g_new(VblkSeg, N);
    g_autofree VblkIo *ios = g_new0(VblkIo, N);
    gint64 deadline = g_get_monotonic_time() + VBLK_TIMEOUT_US;
    uint32_t most = 0;
    unsigned done, waiting_seen = 0, notify_asked = 0;
    int i;

    for (i = 0; i < N; i++) {
        segs[i] = (VblkSeg) { d->data_start + i * 4 * KiB, 4 * KiB };
        ios[i] = (VblkIo) {
            .q = i % NVQS, .type = VIRTIO_BLK_T_OUT, .offset = i * 8 * KiB,
            .segs = &segs[i], .nsegs = 1, .indirect = true,
        };
        vblk_fill(d, &ios[i], 150 + i);
    }
    g_assert_cmpint(vblk_run_for(d, ios, N, 50 * 1000), <, N);
    do {
        uint32_t taken = 0;
        uint16_t used_idx;
        unsigned q;

        g_assert(g_get_monotonic_time() < deadline);
        done = 0;
        for (q = 0; q < NVQS; q++) {
            uint32_t in_use = vq_in_use(d, q, &used_idx);
            uint16_t flags = qtest_readw(d->qts, d->vqs[q]->used);

            taken += in_use;
            done += used_idx;
            if (used_idx + in_use < N / NVQS) {
                waiting_seen++;
                notify_asked += !(flags & VRING_USED_F_NO_NOTIFY);
            }
        }
        if (limited) {
            g_assert_cmpuint(taken, <=, 2 * 2 * BACKEND);
        }
        most = MAX(most, taken);
        g_usleep(5 * 1000);
    } while (done != N);
    g_test_message("at most %u of %u requests taken from the queues; "
                   "notifications asked for in %u of %u looks at a queue "
                   "with requests waiting", most, N, notify_asked,
                   waiting_seen);
    if (!limited) {
        g_assert_cmpuint(most, >, 2 * 2 * BACKEND);
    } else {
        g_assert_cmpuint(waiting_seen, >, 0);
        g_assert_cmpuint(notify_asked, <=, waiting_seen / 10);
    }
    reset_and_read_back(d, ios, N);
}

static const BackendDepthCase backend_depth_cases[] = {
    { "16", 4 }, { "0", 4 }, { "16", 16 },
};

static void run_case(gconstpointer opaque)
{
    const Case *c = opaque;

    c->run(c->backend);
}

int main(int argc, char **argv)
{
    int i, j;

    g_test_init(&argc, &argv, NULL);
    for (i = 0; i < ARRAY_SIZE(backends); i++) {
        for (j = 0; j < ARRAY_SIZE(cases); j++) {
            Case *c = g_new(Case, 1);
            g_autofree char *path = g_strdup_printf("/virtio-blk-io/%s/%s",
                                                    backends[i].name,
                                                    cases[j].name);

            *c = (Case) { &backends[i], cases[j].name, cases[j].run };
            qtest_add_data_func(path, c, run_case);
        }
    }
    qtest_add_func("/virtio-blk-io/queues/1025", test_1025_queues);
    qtest_add_func("/virtio-blk-io/in-flight/idle-at-limit",
                   test_in_flight_idle);
    qtest_add_data_func("/virtio-blk-io/long-chains-memory/default", NULL,
                        test_long_chains_memory);
    qtest_add_data_func("/virtio-blk-io/long-chains-memory/16M",
                        GSIZE_TO_POINTER(16 * MiB), test_long_chains_memory);
    qtest_add_func("/virtio-blk-io/long-chains-parts", test_long_chains_parts);
    qtest_add_func("/virtio-blk-io/coroutine-pool/failed-plug",
                   test_coroutine_pool_failed_plug);
    qtest_add_data_func("/virtio-blk-io/device-depth/default", "",
                        test_device_depth);
    qtest_add_data_func("/virtio-blk-io/device-depth/off",
                        ",aio-max-in-flight=0", test_device_depth);
    for (i = 0; i < ARRAY_SIZE(backend_depth_cases); i++) {
        const BackendDepthCase *c = &backend_depth_cases[i];
        g_autofree char *path =
            g_strdup_printf("/virtio-blk-io/backend-depth/%s/%d-queues",
                            strcmp(c->max_in_flight, "0") ? "limited" :
                            "unlimited",
                            c->nvqs);

        qtest_add_data_func(path, c, test_backend_depth);
    }
    return g_test_run();
}
