/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * virtio-blk requests in flight across migration
 *
 * A write fails once (blkdebug, EIO) on a device with werror=stop: the VM
 * stops with the request parked in the device, which saves it in the
 * migration stream as a virtqueue element.  The VM is migrated to a file
 * and loaded by a second QEMU started with -incoming defer (no KVM
 * needed: both run under qtest), whose disk has no failing rule.  After
 * 'cont' there, the parked write must complete, every other request too,
 * and every byte must read back and be in the image file.
 *
 * The cases cover what the series changed in how elements are saved:
 * split and packed rings, queue sizes up to 4096 with elements of more
 * than 1024 pieces (saved past the old fixed-size record), a packed chain
 * with an indirect table, fixed buffers and iothread-vq-mapping.  A
 * destination whose queue cannot hold the source's ring must refuse the
 * stream cleanly instead of overflowing.  Postcopy must leave a
 * destination with fixed buffers reading and writing the guest's pages.
 * With $VBLK_STOCK_QEMU set to a
 * stock QEMU of the same version, streams between it and ours are tested
 * too (scripts/tests.d/migration-stock).
 */

#include "qemu/osdep.h"
#include "qemu/bswap.h"
#include "qemu/units.h"
#include "qobject/qdict.h"
#include "qobject/qstring.h"
#include "standard-headers/linux/virtio_blk.h"
#include "standard-headers/linux/virtio_config.h"
#include "virtio-blk-helpers.h"

#define DISK_SIZE (64 * MiB)
#define RAM_SIZE (256 * MiB)
#define WAIT_US (30 * 1000 * 1000)

/* The write that fails once covers this disk offset */
#define FAIL_OFFSET (8 * MiB)

enum { OURS, STOCK_SOURCE, STOCK_DESTINATION };

typedef struct MigCase {
    const char *name;
    int stock;                  /* which side is stock QEMU, if any */
    bool packed;
    unsigned queue_size;
    unsigned dst_queue_size;    /* 0: the same */
    int pieces;                 /* data segments of the parked write */
    bool indirect;
    const char *file_opts;      /* of -blockdev file */
    bool vq_mapping;            /* 2 queues on 2 iothreads */
} MigCase;

#define PLAIN "aio=threads,cache.direct=on"
#define FIXED "aio=io_uring,cache.direct=on,aio-fixed-buffers=on"

static const MigCase cases[] = {
    { "split/256", OURS, false, 256, 0, 1, false, PLAIN },
    { "split/1024-indirect", OURS, false, 1024, 0, 64, true, PLAIN },
    { "split/4096-2050-pieces", OURS, false, 4096, 0, 2050, false, PLAIN },
    { "split/4096-2050-pieces/fixed", OURS, false, 4096, 0, 2050, false,
      FIXED },
    { "split/iothread-vq-mapping", OURS, false, 256, 0, 4, false, PLAIN,
      true },
    { "packed/256", OURS, true, 256, 0, 1, false, PLAIN },
    { "packed/4096-indirect-1100-pieces", OURS, true, 4096, 0, 1100, true,
      PLAIN },
    { "packed/256/fixed", OURS, true, 256, 0, 8, false, FIXED },
};

/*
 * Streams between stock QEMU 10.2.2 ($VBLK_STOCK_QEMU) and ours, in a
 * configuration stock accepts.  A packed ring only from stock to ours:
 * stock cannot load its own packed elements (the bug fixed here).
 */
static const MigCase cross[] = {
    { "from-stock/split/1024", STOCK_SOURCE, false, 1024, 0, 64, false,
      PLAIN },
    { "to-stock/split/1024", STOCK_DESTINATION, false, 1024, 0, 64, false,
      PLAIN },
    { "from-stock/packed/256", STOCK_SOURCE, true, 256, 0, 8, true, PLAIN },
};

static const char *stock_qemu;
static const char *our_qemu;

/* The next QEMU the test starts is stock's, or ours */
static void next_qemu(bool stock)
{
    g_setenv("QTEST_QEMU_BINARY", stock ? stock_qemu : our_qemu, true);
}

/* The -blockdev and -device options both sides share */
static char *device_args(const MigCase *c, const char *image,
                         bool failing, unsigned queue_size)
{
    g_autofree char *disk = failing ?
        g_strdup_printf("-blockdev '{\"driver\": \"blkdebug\", "
                        "\"node-name\": \"dbg0\", \"image\": \"file0\", "
                        "\"inject-error\": [{\"event\": \"write_aio\", "
                        "\"errno\": 5, \"sector\": %d, \"once\": true, "
                        "\"immediately\": false}]}' "
                        "-blockdev raw,node-name=disk0,file=dbg0",
                        (int)(FAIL_OFFSET / VBLK_SECTOR)) :
        g_strdup("-blockdev raw,node-name=disk0,file=file0");
    g_autofree char *threads = c->vq_mapping ?
        g_strdup("\"iothread-vq-mapping\": [{\"iothread\": \"io0\"}, "
                 "{\"iothread\": \"io1\"}], \"num-queues\": 2") :
        g_strdup("\"iothread\": \"io0\", \"num-queues\": 1");

    return g_strdup_printf(
        "-machine pc -m 256M -object iothread,id=io0 -object iothread,id=io1 "
        "-blockdev file,node-name=file0,filename=%s,%s %s "
        "-device '{\"driver\": \"virtio-blk-pci\", \"id\": \"vblk0\", "
        "\"addr\": \"04.0\", \"drive\": \"disk0\", \"werror\": \"stop\", "
        "\"queue-size\": %u, \"packed\": %s, %s}'",
        image, c->file_opts, disk, queue_size,
        c->packed ? "true" : "false", threads);
}

static QDict *wait_event(QTestState *qts, const char *name)
{
    gint64 deadline = g_get_monotonic_time() + WAIT_US;
    QDict *ev;

    while (!(ev = qtest_qmp_event_ref(qts, name))) {
        if (g_get_monotonic_time() > deadline) {
            g_error("no %s event within %d s", name, WAIT_US / 1000000);
        }
        g_usleep(10 * 1000);
        qobject_unref(qtest_qmp(qts, "{'execute': 'query-status'}"));
    }
    return ev;
}

/* Wait for query-migrate to end; its final status */
static char *migration_status(QTestState *qts, char **desc)
{
    gint64 deadline = g_get_monotonic_time() + WAIT_US;

    for (;;) {
        QDict *rsp = qtest_qmp(qts, "{'execute': 'query-migrate'}");
        QDict *ret = qdict_get_qdict(rsp, "return");
        const char *status = qdict_get_try_str(ret, "status");

        if (status && (!strcmp(status, "completed") ||
                       !strcmp(status, "failed"))) {
            char *s = g_strdup(status);

            if (desc) {
                *desc = g_strdup(qdict_get_try_str(ret, "error-desc"));
            }
            qobject_unref(rsp);
            return s;
        }
        qobject_unref(rsp);
        g_assert(g_get_monotonic_time() < deadline);
        g_usleep(10 * 1000);
    }
}

/* Stop with a write parked: the STOP event after its BLOCK_IO_ERROR */
static void wait_parked(QTestState *qts)
{
    QDict *ev = wait_event(qts, "BLOCK_IO_ERROR");
    QDict *data = qdict_get_qdict(ev, "data");

    g_assert_cmpstr(qdict_get_str(data, "action"), ==, "stop");
    qobject_unref(ev);
    qobject_unref(wait_event(qts, "STOP"));
}

/*
 * Migrate the stopped source @d to @path and start the destination on it.
 * Without @error the load must succeed; with it, *@error is the
 * destination's error-desc, NULL if it loaded.
 */
static QTestState *migrate(VblkDev *d, const char *path, const char *dst_args,
                           char **error)
{
    g_autofree char *status = NULL;
    g_autofree char *uri = g_strdup_printf("file:%s", path);
    QTestState *dst;

    qtest_qmp_assert_success(d->qts, "{'execute': 'migrate', 'arguments': "
                             "{'uri': %s}}", uri);
    status = migration_status(d->qts, NULL);
    g_assert_cmpstr(status, ==, "completed");

    dst = qtest_initf("%s -incoming defer", dst_args);
    qtest_qmp_assert_success(dst, "{'execute': 'migrate-incoming', "
                             "'arguments': {'uri': %s, "
                             "'exit-on-error': false}}", uri);
    g_free(status);
    status = migration_status(dst, error);
    if (!error) {
        g_assert_cmpstr(status, ==, "completed");
    }
    return dst;
}

/* The test's driver carries on against @dst; the source goes */
static void switch_to(VblkDev *d, QTestState *dst)
{
    qtest_quit(d->qts);
    d->qts = dst;
    d->bus->qts = dst;
}

/*
 * Split ring: a batch of writes, one of them (the one with c->pieces
 * pieces) at FAIL_OFFSET, goes in; the VM stops on its error; the others
 * complete before or after the migration.
 */
enum { NWRITES = 8 };

static void fill_batch(VblkDev *d, const MigCase *c, VblkIo *ios,
                       VblkSeg *segs, unsigned gen)
{
    uint64_t gpa = d->data_start;
    int i, used = 0;

    for (i = 0; i < NWRITES; i++) {
        int n = i == 0 ? c->pieces : 2;
        /* pieces of 4 KiB, 8 KiB apart in guest RAM: never merged */
        int j;

        for (j = 0; j < n; j++) {
            segs[used + j] = (VblkSeg) { gpa + j * 8 * KiB, 4 * KiB };
        }
        gpa += n * 8 * KiB;
        ios[i] = (VblkIo) {
            .q = i % d->nvqs, .type = VIRTIO_BLK_T_OUT,
            .offset = i == 0 ? FAIL_OFFSET : 16 * MiB + i * MiB,
            .segs = &segs[used], .nsegs = n, .indirect = c->indirect,
        };
        vblk_fill(d, &ios[i], gen);
        used += n;
    }
}

static void read_back(VblkDev *d, VblkIo *ios)
{
    int i;

    for (i = 0; i < NWRITES; i++) {
        ios[i].type = VIRTIO_BLK_T_IN;
        vblk_poison(d, &ios[i]);
    }
    vblk_run(d, ios, NWRITES);
    for (i = 0; i < NWRITES; i++) {
        g_assert_cmpint(ios[i].status, ==, VIRTIO_BLK_S_OK);
        vblk_check(d, &ios[i]);
    }
}

static void test_split(const MigCase *c, const char *image, const char *path)
{
    g_autofree char *src_args = device_args(c, image, true, c->queue_size);
    g_autofree char *dst_args = device_args(c, image, false, c->queue_size);
    int total = c->pieces + 2 * (NWRITES - 1);
    g_autofree VblkSeg *segs = g_new(VblkSeg, total);
    VblkIo ios[NWRITES];
    VblkBatch *b;
    VblkDev *d;
    int i;

    next_qemu(c->stock == STOCK_SOURCE);
    d = vblk_start(RAM_SIZE, g_strdup(image), c->vq_mapping ? 2 : 1, "%s",
                   src_args);
    next_qemu(c->stock == STOCK_DESTINATION);
    fill_batch(d, c, ios, segs, 10);
    b = vblk_batch_start(d, ios, NWRITES);
    wait_parked(d->qts);
    vblk_batch_poll(b);

    switch_to(d, migrate(d, path, dst_args, NULL));
    qtest_qmp_assert_success(d->qts, "{'execute': 'cont'}");
    vblk_batch_wait(b);
    for (i = 0; i < NWRITES; i++) {
        g_assert_cmpint(ios[i].status, ==, VIRTIO_BLK_S_OK);
    }
    read_back(d, ios);
    vblk_stop(d);
}

/*
 * Packed ring: the write is put in the ring by hand, as one chain of
 * header, c->pieces data descriptors and status, or as one descriptor
 * pointing at an indirect table of them.  It is the only request.
 */
static void test_packed(const MigCase *c, const char *image, const char *path)
{
    g_autofree char *src_args = device_args(c, image, true, c->queue_size);
    g_autofree char *dst_args = device_args(c, image, false, c->queue_size);
    int ndescs = c->pieces + 2;
    g_autofree struct vring_packed_desc *descs =
        g_new0(struct vring_packed_desc, ndescs);
    g_autofree uint8_t *data = g_malloc(c->pieces * 4 * KiB);
    struct virtio_blk_outhdr hdr = {
        .type = cpu_to_le32(VIRTIO_BLK_T_OUT),
        .sector = cpu_to_le64(FAIL_OFFSET / VBLK_SECTOR),
    };
    gint64 deadline;
    uint64_t hdr_gpa, status_gpa, table_gpa, data_gpa;
    struct vring_packed_desc used;
    QVirtQueue *vq;
    VblkDev *d;
    int i;

    next_qemu(c->stock == STOCK_SOURCE);
    d = vblk_start(RAM_SIZE, g_strdup(image), 1, "%s", src_args);
    next_qemu(c->stock == STOCK_DESTINATION);
    d->extra_features |= 1ull << VIRTIO_F_RING_PACKED;
    vblk_reset(d);
    vq = d->vqs[0];

    hdr_gpa = d->data_start;
    status_gpa = hdr_gpa + 512;
    table_gpa = hdr_gpa + 4 * KiB;
    data_gpa = hdr_gpa + 1 * MiB;
    qtest_memwrite(d->qts, hdr_gpa, &hdr, sizeof(hdr));
    qtest_writeb(d->qts, status_gpa, 0xff);
    vblk_pattern(data, c->pieces * 4 * KiB, FAIL_OFFSET, 20);
    descs[0] = (struct vring_packed_desc) {
        .addr = cpu_to_le64(hdr_gpa), .len = cpu_to_le32(sizeof(hdr)),
    };
    for (i = 0; i < c->pieces; i++) {
        /* 4 KiB pieces, 8 KiB apart: never merged */
        uint64_t gpa = data_gpa + i * 8 * KiB;

        qtest_memwrite(d->qts, gpa, data + i * 4 * KiB, 4 * KiB);
        descs[1 + i] = (struct vring_packed_desc) {
            .addr = cpu_to_le64(gpa), .len = cpu_to_le32(4 * KiB),
        };
    }
    descs[ndescs - 1] = (struct vring_packed_desc) {
        .addr = cpu_to_le64(status_gpa), .len = cpu_to_le32(1),
        .flags = cpu_to_le16(VRING_DESC_F_WRITE),
    };
    memcpy(d->shadow + FAIL_OFFSET, data, c->pieces * 4 * KiB);

    /*
     * Fresh from a reset, the driver's wrap counter is 1: available is
     * AVAIL set and USED clear.  The buffer id goes on the last
     * descriptor of the chain.
     */
    if (c->indirect) {
        struct vring_packed_desc head = {
            .addr = cpu_to_le64(table_gpa),
            .len = cpu_to_le32(ndescs * sizeof(descs[0])),
            .id = cpu_to_le16(7),
            .flags = cpu_to_le16(VRING_DESC_F_INDIRECT |
                                 1 << VRING_PACKED_DESC_F_AVAIL),
        };

        g_assert_cmpuint(table_gpa + ndescs * sizeof(descs[0]), <=,
                         data_gpa);
        qtest_memwrite(d->qts, table_gpa, descs, ndescs * sizeof(descs[0]));
        qtest_memwrite(d->qts, vq->desc, &head, sizeof(head));
    } else {
        g_assert_cmpint(ndescs, <=, vq->size);
        for (i = 0; i < ndescs; i++) {
            uint16_t flags = le16_to_cpu(descs[i].flags) |
                             1 << VRING_PACKED_DESC_F_AVAIL;

            if (i < ndescs - 1) {
                flags |= VRING_DESC_F_NEXT;
            } else {
                descs[i].id = cpu_to_le16(7);
            }
            descs[i].flags = cpu_to_le16(flags);
        }
        qtest_memwrite(d->qts, vq->desc, descs, ndescs * sizeof(descs[0]));
    }
    d->vdev->bus->virtqueue_kick(d->vdev, vq);
    wait_parked(d->qts);

    switch_to(d, migrate(d, path, dst_args, NULL));
    qtest_qmp_assert_success(d->qts, "{'execute': 'cont'}");

    /* The device writes the used descriptor over the first slot */
    deadline = g_get_monotonic_time() + WAIT_US;
    for (;;) {
        qtest_memread(d->qts, vq->desc, &used, sizeof(used));
        if (le16_to_cpu(used.flags) & (1 << VRING_PACKED_DESC_F_USED)) {
            break;
        }
        g_assert(g_get_monotonic_time() < deadline);
        g_usleep(1000);
    }
    g_assert_cmpuint(le16_to_cpu(used.id), ==, 7);
    g_assert_cmpuint(qtest_readb(d->qts, status_gpa), ==, VIRTIO_BLK_S_OK);
    vblk_reset(d);
    vblk_stop(d);
}

static void run_case(gconstpointer opaque)
{
    const MigCase *c = opaque;
    char *image = vblk_make_image(DISK_SIZE);
    g_autofree char *path = g_strdup_printf("%s.mig", image);

    if (c->packed) {
        test_packed(c, image, path);
    } else {
        test_split(c, image, path);
    }
    unlink(path);
    g_free(image);
}

/*
 * A destination whose queue is smaller than the source's must refuse the
 * stream: the migration fails with an error and the destination lives on.
 */
static void test_smaller_destination(gconstpointer opaque)
{
    const MigCase *c = opaque;
    char *image = vblk_make_image(DISK_SIZE);
    g_autofree char *path = g_strdup_printf("%s.mig", image);
    g_autofree char *src_args = device_args(c, image, true, c->queue_size);
    g_autofree char *dst_args = device_args(c, image, false,
                                            c->dst_queue_size);
    g_autofree VblkSeg *segs = g_new(VblkSeg, c->pieces + 2 * NWRITES);
    g_autofree char *error = NULL;
    VblkIo ios[NWRITES];
    QTestState *dst;
    VblkDev *d;

    next_qemu(false);
    d = vblk_start(RAM_SIZE, g_strdup(image), 1, "%s", src_args);
    if (c->packed) {
        d->extra_features |= 1ull << VIRTIO_F_RING_PACKED;
        vblk_reset(d);
    } else {
        fill_batch(d, c, ios, segs, 30);
        vblk_batch_start(d, ios, NWRITES);
        wait_parked(d->qts);
    }

    dst = migrate(d, path, dst_args, &error);
    g_test_message("destination: %s", error ? error : "(no error)");
    g_assert_nonnull(error);
    /* Still alive and answering */
    qtest_qmp_assert_success(dst, "{'execute': 'query-status'}");
    qtest_quit(dst);
    vblk_quit(d);
    unlink(path);
    unlink(image);
    g_free(image);
}

/*
 * A driver may make a ring as large as 1024 entries, or the queue-size if
 * that is larger, so that is what the destination holds: a source of 4096
 * does not fit a destination of 1024.
 */
static const MigCase smaller[] = {
    { "split", OURS, false, 4096, 1024, 1500, false, PLAIN },
    { "packed", OURS, true, 4096, 1024, 1, false, PLAIN },
};

/* Set the postcopy-ram capability of @qts */
static void enable_postcopy(QTestState *qts)
{
    qtest_qmp_assert_success(qts, "{'execute': 'migrate-set-capabilities', "
                             "'arguments': {'capabilities': [{'capability': "
                             "'postcopy-ram', 'state': true}]}}");
}

/* The migration status of @qts now */
static char *status_now(QTestState *qts)
{
    QDict *rsp = qtest_qmp(qts, "{'execute': 'query-migrate'}");
    char *status = g_strdup(qdict_get_try_str(qdict_get_qdict(rsp, "return"),
                                              "status"));

    qobject_unref(rsp);
    return status;
}

/*
 * Postcopy to a destination whose guest RAM is registered as io_uring
 * fixed buffers.  Before the first page comes, postcopy discards all of
 * the destination's RAM; the pages io_uring pinned at start-up are then no
 * longer the guest's, and every page the guest touches afterwards is a new
 * one.  Requests after the migration must read and write the guest's
 * pages, and go fixed again once postcopy has ended.  The discard comes
 * as soon as postcopy is advised, so a migration that could have switched
 * to postcopy but completed in precopy (@opaque false) has it too.
 */
static void test_postcopy(gconstpointer opaque)
{
    bool start_postcopy = GPOINTER_TO_INT(opaque);
    MigCase c = { "postcopy", OURS, false, 256, 0, 1, false, FIXED };
    char *image = vblk_make_image(DISK_SIZE);
    g_autofree char *args = device_args(&c, image, false, 256);
    g_autofree char *dir = g_dir_make_tmp("vblk-postcopy-XXXXXX", NULL);
    g_autofree char *uri = g_strdup_printf("unix:%s/mig.sock", dir);
    g_autofree char *status = NULL;
    VblkSeg segs[8];
    VblkIo ios[8];
    QTestState *dst;
    QDict *info;
    VblkDev *d;
    int i;

    next_qemu(false);
    d = vblk_start(RAM_SIZE, image, 1, "%s", args);
    for (i = 0; i < 8; i++) {
        vblk_split(&segs[i], d->data_start + i * MiB, 64 * KiB, 1);
        ios[i] = (VblkIo) { .q = 0, .offset = i * MiB, .segs = &segs[i],
                            .nsegs = 1 };
    }
    vblk_write_read(d, ios, 8, 40);

    dst = qtest_initf("%s -incoming defer", args);
    enable_postcopy(d->qts);
    enable_postcopy(dst);
    qtest_qmp_assert_success(dst, "{'execute': 'migrate-incoming', "
                             "'arguments': {'uri': %s}}", uri);
    if (start_postcopy) {
        /* Slow enough that precopy is still going when postcopy starts */
        qtest_qmp_assert_success(d->qts,
                                 "{'execute': 'migrate-set-parameters', "
                                 "'arguments': {'max-bandwidth': 65536}}");
    }
    qtest_qmp_assert_success(d->qts, "{'execute': 'migrate', "
                             "'arguments': {'uri': %s}}", uri);
    if (start_postcopy) {
        qtest_qmp_assert_success(d->qts,
                                 "{'execute': 'migrate-start-postcopy'}");
    }
    for (;;) {
        g_free(status);
        status = status_now(d->qts);
        if (!strcmp(status, "postcopy-active") ||
            !strcmp(status, "completed") || !strcmp(status, "failed")) {
            break;
        }
        g_usleep(1000);
    }
    g_assert_cmpstr(status, ==,
                    start_postcopy ? "postcopy-active" : "completed");
    g_free(status);
    status = migration_status(d->qts, NULL);
    g_assert_cmpstr(status, ==, "completed");
    g_free(status);
    status = migration_status(dst, NULL);
    g_assert_cmpstr(status, ==, "completed");
    switch_to(d, dst);

    /* The destination registers its RAM again once postcopy has ended */
    vblk_wait_pinned(d->qts);
    vblk_write_read(d, ios, 8, 50);
    info = vblk_fixed_info(d);
    g_assert_cmpuint(qdict_get_int(vblk_fixed_ring(info, "io0"),
                                   "fixed-reads"), >, 0);
    qobject_unref(info);
    vblk_stop(d);
    rmdir(dir);
}

int main(int argc, char **argv)
{
    int i;

    g_test_init(&argc, &argv, NULL);
    our_qemu = g_getenv("QTEST_QEMU_BINARY");
    stock_qemu = g_getenv("VBLK_STOCK_QEMU");
    for (i = 0; stock_qemu && i < ARRAY_SIZE(cross); i++) {
        g_autofree char *path = g_strdup_printf("/virtio-blk-migration/%s",
                                                cross[i].name);

        qtest_add_data_func(path, &cross[i], run_case);
    }
    for (i = 0; i < ARRAY_SIZE(cases); i++) {
        g_autofree char *path = g_strdup_printf("/virtio-blk-migration/%s",
                                                cases[i].name);

        qtest_add_data_func(path, &cases[i], run_case);
    }
    for (i = 0; i < ARRAY_SIZE(smaller); i++) {
        g_autofree char *path =
            g_strdup_printf("/virtio-blk-migration/smaller-destination/%s",
                            smaller[i].name);

        qtest_add_data_func(path, &smaller[i], test_smaller_destination);
    }
    qtest_add_data_func("/virtio-blk-migration/postcopy/fixed",
                        GINT_TO_POINTER(true), test_postcopy);
    qtest_add_data_func("/virtio-blk-migration/postcopy-advised/fixed",
                        GINT_TO_POINTER(false), test_postcopy);
    return g_test_run();
}
