/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * io_uring fixed buffers under virtio-blk: every byte verified, and the
 * x-query-io-uring-buffers counters prove the fixed path ran (or did not,
 * where it must not).
 */

#include "qemu/osdep.h"
#include "qemu/units.h"
#include "qobject/qdict.h"
#include "qobject/qjson.h"
#include "qobject/qlist.h"
#include "qobject/qstring.h"
#include "standard-headers/linux/virtio_blk.h"
#include "vblk-common.h"

#define DISK_SIZE (64 * MiB)

/*
 * Requests of every size from 4 KiB to 8 MiB, in 1 to 128 segments.  Each
 * segment is a multiple of 4 KiB: O_DIRECT may need that much memory
 * alignment, and file-posix sends less aligned requests to the thread
 * pool, where fixed buffers have no say.
 */
static const struct {
    uint32_t size;
    int segs;
} io_shapes[] = {
    { 4096, 1 }, { 32768, 8 }, { 65536, 1 }, { 65536, 16 },
    { MiB, 1 }, { MiB, 64 }, { 8 * MiB, 1 }, { 8 * MiB, 4 },
    { 8 * MiB, 128 },
};

typedef struct Boundaries {
    uint64_t host_base;     /* host address of guest physical 0 */
    int n;
    uint64_t gpa[8];        /* guest addresses where a chunk starts */
    uint64_t page_size;
} Boundaries;

static char *fixed_drive(char *image, const char *extra)
{
    return g_strdup_printf("-blockdev file,node-name=disk0,filename=%s,"
                           "aio=io_uring,cache.direct=on%s",
                           image, extra);
}

/*
 * Find guest RAM among the registered chunks: the run of host-contiguous
 * chunks adding up to @ram_size.  Record where inside it a chunk starts.
 */
static Boundaries ram_chunks(QDict *info, uint64_t ram_size)
{
    QList *list = qdict_get_qlist(info, "chunks");
    g_autoptr(GArray) starts = g_array_new(false, false, sizeof(uint64_t));
    g_autoptr(GArray) sizes = g_array_new(false, false, sizeof(uint64_t));
    g_autoptr(GArray) pages = g_array_new(false, false, sizeof(uint64_t));
    QListEntry *e;
    unsigned i, j;

    QLIST_FOREACH_ENTRY(list, e) {
        QDict *c = qobject_to(QDict, qlist_entry_obj(e));
        uint64_t v;

        v = qdict_get_int(c, "host-address");
        g_array_append_val(starts, v);
        v = qdict_get_int(c, "size");
        g_array_append_val(sizes, v);
        v = qdict_get_int(c, "page-size");
        g_array_append_val(pages, v);
    }
    for (i = 0; i < starts->len; i++) {
        uint64_t base = g_array_index(starts, uint64_t, i);
        uint64_t end = base;
        Boundaries b = {
            .host_base = base,
            .page_size = g_array_index(pages, uint64_t, i),
        };

        for (j = i; j < starts->len; j++) {
            if (g_array_index(starts, uint64_t, j) != end) {
                break;
            }
            if (j > i && b.n < ARRAY_SIZE(b.gpa)) {
                b.gpa[b.n++] = end - base;
            }
            end += g_array_index(sizes, uint64_t, j);
            if (end - base == ram_size) {
                return b;
            }
        }
    }
    g_error("guest RAM of %" PRIu64 " bytes is not among the chunks",
            ram_size);
}

/* A guest address for @len bytes of data that no chunk boundary cuts */
static uint64_t data_area(VblkDev *d, const Boundaries *b, uint64_t len)
{
    uint64_t gpa = d->data_start;
    int i;

    for (i = 0; i < b->n; i++) {
        if (b->gpa[i] > gpa && b->gpa[i] < gpa + len) {
            gpa = b->gpa[i];
        }
    }
    g_assert_cmpuint(gpa + len, <=, d->ram_size);
    return gpa;
}

/* Room for run_shapes() in guest RAM that no chunk boundary cuts */
static uint64_t shapes_area(VblkDev *d)
{
    QDict *info = vblk_fixed_info(d);
    Boundaries b = ram_chunks(info, d->ram_size);

    qobject_unref(info);
    return data_area(d, &b, 16 * MiB);
}

/* Check the chunk table: page size and the bvecs the kernel needs */
static void check_ram_chunks(QDict *info, uint64_t ram_size,
                             uint64_t page_size)
{
    QListEntry *e;
    uint64_t seen = 0;
    Boundaries b = ram_chunks(info, ram_size);

    g_assert_cmpuint(b.page_size, ==, page_size);
    g_assert_true(qdict_get_bool(info, "kernel-coalesces"));
    QLIST_FOREACH_ENTRY(qdict_get_qlist(info, "chunks"), e) {
        QDict *c = qobject_to(QDict, qlist_entry_obj(e));
        uint64_t start = qdict_get_int(c, "host-address");
        uint64_t size = qdict_get_int(c, "size");

        if (start < b.host_base || start >= b.host_base + ram_size) {
            continue;
        }
        g_assert_true(qdict_get_bool(c, "pinned"));
        g_assert_cmpuint(size, <=, GiB);
        /* Cut at 1 GiB-aligned host addresses only */
        g_assert_cmpuint((start + size) % GiB == 0 ||
                         start + size == b.host_base + ram_size, ==, 1);
        g_assert_cmpuint(qdict_get_int(c, "page-size"), ==, page_size);
        g_assert_cmpuint(qdict_get_int(c, "bvecs"), ==,
                         DIV_ROUND_UP(size, page_size));
        seen += size;
    }
    g_assert_cmpuint(seen, ==, ram_size);
}

/*
 * Write every shape, then read each back split differently; returns the
 * number of requests of each kind on queue @q.
 */
static void run_shapes(VblkDev *d, unsigned q, uint64_t gpa,
                       uint64_t disk_base, unsigned gen,
                       int *writes, int *reads)
{
    VblkSeg segs[128];
    uint64_t offset = disk_base;
    int i;

    for (i = 0; i < ARRAY_SIZE(io_shapes); i++) {
        uint32_t size = io_shapes[i].size;
        int n = io_shapes[i].segs;

        offset = QEMU_ALIGN_UP(offset, 4096);
        if (offset + size > d->capacity) {
            offset = 0;
        }
        vblk_split(segs, gpa, size, n);
        vblk_write_pattern(d, q, offset, segs, n, gen + i);
        /* Read it back split differently, elsewhere in RAM */
        n = n > 1 ? 1 : MAX(1, MIN(size / 4096, 64));
        vblk_split(segs, gpa + 8 * MiB, size, n);
        vblk_read_verify(d, q, offset, segs, n);
        offset += size;
    }
    *writes += ARRAY_SIZE(io_shapes);
    *reads += ARRAY_SIZE(io_shapes);
}

static void assert_ring(QDict *info, const char *name, int reads, int writes)
{
    QDict *ring = vblk_fixed_ring(info, name);

    g_assert_nonnull(ring);
    g_test_message("ring %s: %s", name,
                   qobject_to_json(QOBJECT(ring))->str);
    g_assert_true(qdict_get_bool(ring, "synced"));
    g_assert_false(qdict_haskey(ring, "disabled-reason"));
    g_assert_cmpint(qdict_get_int(ring, "fixed-reads"), ==, reads);
    g_assert_cmpint(qdict_get_int(ring, "fixed-writes"), ==, writes);
    g_assert_cmpint(vblk_ring_fallbacks(ring, "unregistered"), ==, 0);
    g_assert_cmpint(vblk_ring_fallbacks(ring, "crosses-chunk"), ==, 0);
    g_assert_cmpint(vblk_ring_fallbacks(ring, "not-pinned"), ==, 0);
    g_assert_cmpint(vblk_ring_fallbacks(ring, "efault"), ==, 0);
}

/* One queue on an iothread, guest RAM on @mem */
static void test_shapes(uint64_t ram, const char *mem, uint64_t page_size)
{
    char *image = vblk_make_image(DISK_SIZE);
    g_autofree char *drive = fixed_drive(image, ",aio-fixed-buffers=on");
    VblkDev *d;
    QDict *info;
    Boundaries b;
    int reads = 0, writes = 0;

    d = vblk_start(ram, image, 1,
                   "-machine pc,memory-backend=ram0 -m %" PRIu64 "M "
                   "-object %s,id=ram0,size=%" PRIu64 "M "
                   "-object iothread,id=io0 %s "
                   "-device virtio-blk-pci,id=vblk0,addr=04.0,drive=disk0,"
                   "iothread=io0",
                   ram / MiB, mem, ram / MiB, drive);
    info = vblk_fixed_info(d);
    check_ram_chunks(info, ram, page_size);
    b = ram_chunks(info, ram);
    qobject_unref(info);

    run_shapes(d, 0, data_area(d, &b, 16 * MiB), 0, 1, &writes, &reads);

    info = vblk_fixed_info(d);
    assert_ring(info, "io0", reads, writes);
    qobject_unref(info);
    vblk_stop(d);
}

static void test_hugetlb(void)
{
    if (!vblk_have_hugepages(256 * MiB)) {
        g_test_skip("cannot reserve 256 MiB of 2 MiB hugepages");
        return;
    }
    test_shapes(256 * MiB, "memory-backend-memfd,hugetlb=on,hugetlbsize=2M",
                2 * MiB);
}

static void test_small_pages(void)
{
    test_shapes(256 * MiB, "memory-backend-memfd", 4096);
}

/*
 * 512-byte requests and 512-byte segments at odd 512-byte offsets.  A
 * file image makes file-posix align requests to 4 KiB through bounce
 * buffers; a block device with 512-byte sectors takes them as they are,
 * so each one must go fixed.
 */
static void test_small_requests(void)
{
    static const struct {
        uint32_t size;
        int segs;
    } shapes[] = {
        { 512, 1 }, { 1024, 2 }, { 1536, 3 }, { 4096, 8 }, { 65536, 128 },
    };
    char *image;
    g_autofree char *loop = NULL;
    VblkDev *d;
    QDict *info;
    VblkSeg segs[128];
    uint64_t offset = 0;
    int i, n;

    image = vblk_make_image(DISK_SIZE);
    loop = vblk_loop_attach(image);
    if (!loop) {
        g_test_skip("cannot attach a loop device (not root?)");
        unlink(image);
        g_free(image);
        return;
    }
    d = vblk_start(256 * MiB, image, 1,
                   "-machine pc -m 256M -object iothread,id=io0 "
                   "-blockdev host_device,node-name=disk0,filename=%s,"
                   "aio=io_uring,cache.direct=on,aio-fixed-buffers=on "
                   "-device virtio-blk-pci,id=vblk0,addr=04.0,drive=disk0,"
                   "iothread=io0", loop);
    for (i = 0; i < ARRAY_SIZE(shapes); i++) {
        /* Odd 512-byte offsets, in RAM and on the disk */
        n = vblk_split(segs, d->data_start + 512 * (2 * i + 1),
                       shapes[i].size, shapes[i].segs);
        vblk_write_pattern(d, 0, offset + 512, segs, n, 20 + i);
        n = vblk_split(segs, d->data_start + 8 * MiB + 512, shapes[i].size,
                       shapes[i].segs > 1 ? 1 : shapes[i].size / 512);
        vblk_read_verify(d, 0, offset + 512, segs, n);
        offset += MiB;
    }
    info = vblk_fixed_info(d);
    assert_ring(info, "io0", ARRAY_SIZE(shapes), ARRAY_SIZE(shapes));
    qobject_unref(info);
    d->loop = g_steal_pointer(&loop);
    vblk_stop(d);
}

/* With the option off nothing is registered and nothing changes */
static void test_off(void)
{
    char *image = vblk_make_image(DISK_SIZE);
    g_autofree char *drive = fixed_drive(image, "");
    VblkDev *d;
    QDict *info;
    int reads = 0, writes = 0;

    d = vblk_start(256 * MiB, image, 1,
                   "-machine pc -m 256M -object iothread,id=io0 %s "
                   "-device virtio-blk-pci,id=vblk0,addr=04.0,drive=disk0,"
                   "iothread=io0", drive);
    run_shapes(d, 0, d->data_start, 0, 1, &writes, &reads);
    info = vblk_fixed_info(d);
    g_assert_cmpuint(qdict_get_int(info, "registered-bytes"), ==, 0);
    g_assert_null(vblk_fixed_ring(info, "io0"));
    qobject_unref(info);
    vblk_stop(d);
}

/*
 * 2 GiB of guest RAM always spans a 1 GiB-aligned host address, so one
 * chunk boundary lies inside it.  Segments that end on it, straddle it,
 * or sit on both sides of it, and a 2 MiB hugepage boundary.
 */
static void test_chunk_boundary(void)
{
    uint64_t ram = 2 * GiB;
    char *image;
    g_autofree char *drive = NULL;
    VblkDev *d;
    QDict *info, *ring;
    Boundaries b;
    VblkSeg segs[2];
    uint64_t cut;
    int fixed = 0;

    if (!vblk_have_hugepages(ram)) {
        g_test_skip("cannot reserve 2 GiB of 2 MiB hugepages");
        return;
    }
    image = vblk_make_image(DISK_SIZE);
    drive = fixed_drive(image, ",aio-fixed-buffers=on");
    d = vblk_start(ram, image, 1,
                   "-machine pc,memory-backend=ram0 -m 2G "
                   "-object memory-backend-memfd,id=ram0,size=2G,hugetlb=on,"
                   "hugetlbsize=2M -object iothread,id=io0 %s "
                   "-device virtio-blk-pci,id=vblk0,addr=04.0,drive=disk0,"
                   "iothread=io0", drive);
    info = vblk_fixed_info(d);
    b = ram_chunks(info, ram);
    qobject_unref(info);
    g_assert_cmpint(b.n, >=, 1);
    cut = b.gpa[0];
    if (cut < 2 * MiB) {        /* keep clear of the allocator's area */
        g_assert_cmpint(b.n, >=, 2);
        cut = b.gpa[1];
    }
    g_assert_cmpuint(cut % (2 * MiB), ==, 0);

    /* Ends exactly on the boundary, starts exactly on it: fixed */
    segs[0] = (VblkSeg) { cut - 64 * 1024, 64 * 1024 };
    vblk_write_pattern(d, 0, 0, segs, 1, 7);
    vblk_read_verify(d, 0, 0, segs, 1);
    segs[0] = (VblkSeg) { cut, 64 * 1024 };
    vblk_write_pattern(d, 0, MiB, segs, 1, 8);
    vblk_read_verify(d, 0, MiB, segs, 1);
    fixed += 2;

    /* A hugepage boundary inside a chunk is no obstacle */
    segs[0] = (VblkSeg) { cut + 2 * MiB - 4096, 8192 };
    vblk_write_pattern(d, 0, 2 * MiB, segs, 1, 9);
    vblk_read_verify(d, 0, 2 * MiB, segs, 1);
    fixed += 1;

    /* Straddling the chunk boundary: the normal path, same data */
    segs[0] = (VblkSeg) { cut - 4096, 3 * 4096 };
    vblk_write_pattern(d, 0, 3 * MiB, segs, 1, 10);
    vblk_read_verify(d, 0, 3 * MiB, segs, 1);
    /* One segment each side of it */
    segs[0] = (VblkSeg) { cut - 8192, 4096 };
    segs[1] = (VblkSeg) { cut + 4096, 4096 };
    vblk_write_pattern(d, 0, 4 * MiB, segs, 2, 11);
    vblk_read_verify(d, 0, 4 * MiB, segs, 2);

    info = vblk_fixed_info(d);
    ring = vblk_fixed_ring(info, "io0");
    g_assert_nonnull(ring);
    g_assert_cmpint(qdict_get_int(ring, "fixed-reads"), ==, fixed);
    g_assert_cmpint(qdict_get_int(ring, "fixed-writes"), ==, fixed);
    g_assert_cmpint(vblk_ring_fallbacks(ring, "crosses-chunk"), ==, 4);
    g_assert_cmpint(vblk_ring_fallbacks(ring, "unregistered"), ==, 0);
    qobject_unref(info);
    vblk_stop(d);
}

/*
 * Two NUMA nodes, two memory backends, two RAMBlocks: a segment across
 * guest address 128 MiB maps to two host ranges that are not adjacent.
 */
static void test_ramblock_boundary(void)
{
    char *image;
    g_autofree char *drive = NULL;
    VblkDev *d;
    QDict *info, *ring;
    VblkSeg seg = { 128 * MiB - 8192, 4 * 4096 };

    if (!vblk_have_hugepages(256 * MiB)) {
        g_test_skip("cannot reserve 256 MiB of 2 MiB hugepages");
        return;
    }
    image = vblk_make_image(DISK_SIZE);
    drive = fixed_drive(image, ",aio-fixed-buffers=on");
    d = vblk_start(256 * MiB, image, 1,
                   "-machine pc -m 256M "
                   "-object memory-backend-memfd,id=m0,size=128M,hugetlb=on "
                   "-object memory-backend-memfd,id=m1,size=128M "
                   "-numa node,memdev=m0 -numa node,memdev=m1 "
                   "-object iothread,id=io0 %s "
                   "-device virtio-blk-pci,id=vblk0,addr=04.0,drive=disk0,"
                   "iothread=io0", drive);
    d->data_start = 64 * MiB;
    vblk_write_pattern(d, 0, 0, &seg, 1, 3);
    vblk_read_verify(d, 0, 0, &seg, 1);
    /* Each side alone is fixed, on either kind of page */
    seg = (VblkSeg) { 128 * MiB - 8192, 8192 };
    vblk_write_pattern(d, 0, MiB, &seg, 1, 4);
    vblk_read_verify(d, 0, MiB, &seg, 1);
    seg = (VblkSeg) { 128 * MiB, 8192 };
    vblk_write_pattern(d, 0, 2 * MiB, &seg, 1, 5);
    vblk_read_verify(d, 0, 2 * MiB, &seg, 1);

    info = vblk_fixed_info(d);
    ring = vblk_fixed_ring(info, "io0");
    g_assert_nonnull(ring);
    g_assert_cmpint(vblk_ring_fallbacks(ring, "crosses-chunk"), ==, 2);
    g_assert_cmpint(qdict_get_int(ring, "fixed-reads"), ==, 2);
    g_assert_cmpint(qdict_get_int(ring, "fixed-writes"), ==, 2);
    qobject_unref(info);
    vblk_stop(d);
}

/* The kernel's accounting of pinned pages of process @pid, in bytes */
static uint64_t vm_pinned(pid_t pid)
{
    g_autofree char *path = g_strdup_printf("/proc/%d/status", pid);
    g_autofree char *text = NULL;
    char *line;

    g_assert(g_file_get_contents(path, &text, NULL, NULL));
    line = strstr(text, "VmPin:");
    g_assert_nonnull(line);
    return g_ascii_strtoull(line + strlen("VmPin:"), NULL, 10) * 1024;
}

/*
 * Two iothreads, one queue each: both rings do fixed I/O.  With cloning,
 * guest RAM is pinned once; without, once per ring.
 */
static void test_iothreads(gconstpointer opaque)
{
    bool clone = GPOINTER_TO_INT(opaque);
    char *image;
    g_autofree char *drive = NULL;
    VblkDev *d;
    QDict *info;
    int reads[2] = { 0 }, writes[2] = { 0 };
    uint64_t registered, pinned;
    unsigned q;

    if (!vblk_have_hugepages(256 * MiB)) {
        g_test_skip("cannot reserve 256 MiB of 2 MiB hugepages");
        return;
    }
    if (!clone) {
        g_setenv("QEMU_IO_URING_FIXED_NO_CLONE", "1", true);
    }
    image = vblk_make_image(DISK_SIZE);
    drive = fixed_drive(image, ",aio-fixed-buffers=on");
    d = vblk_start(256 * MiB, image, 2,
                   "-machine pc,memory-backend=ram0 -m 256M "
                   "-object memory-backend-memfd,id=ram0,size=256M,"
                   "hugetlb=on,hugetlbsize=2M "
                   "-object iothread,id=io0 -object iothread,id=io1 %s "
                   "-device '{\"driver\": \"virtio-blk-pci\", \"id\": "
                   "\"vblk0\", \"addr\": \"04.0\", \"drive\": \"disk0\", "
                   "\"num-queues\": 2, \"iothread-vq-mapping\": "
                   "[{\"iothread\": \"io0\"}, {\"iothread\": \"io1\"}]}'",
                   drive);
    g_unsetenv("QEMU_IO_URING_FIXED_NO_CLONE");

    for (q = 0; q < 2; q++) {
        Boundaries b;

        info = vblk_fixed_info(d);
        b = ram_chunks(info, 256 * MiB);
        qobject_unref(info);
        run_shapes(d, q, data_area(d, &b, 16 * MiB), q * 32 * MiB, q * 16,
                   &writes[q], &reads[q]);
    }

    info = vblk_fixed_info(d);
    assert_ring(info, "io0", reads[0], writes[0]);
    assert_ring(info, "io1", reads[1], writes[1]);
    g_assert_cmpint(qdict_get_bool(info, "clone-buffers"), ==, clone);
    g_assert_cmpint(qdict_get_bool(vblk_fixed_ring(info, "io0"), "cloned"),
                    ==, clone);
    registered = qdict_get_int(info, "registered-bytes");
    pinned = qdict_get_int(info, "pinned-bytes");
    g_assert_cmpuint(pinned, ==, clone ? registered : 2 * registered);
    /* The kernel agrees: pinned once, or once per ring */
    g_assert_cmpuint(vm_pinned(qtest_pid(d->qts)), ==, pinned);
    qobject_unref(info);
    vblk_stop(d);
}

static void qmp_ok(QTestState *qts, const char *fmt, ...) G_GNUC_PRINTF(2, 3);
static void qmp_ok(QTestState *qts, const char *fmt, ...)
{
    va_list ap;
    QDict *rsp;

    va_start(ap, fmt);
    rsp = qtest_vqmp(qts, fmt, ap);
    va_end(ap);
    if (!qdict_haskey(rsp, "return")) {
        g_error("QMP failed: %s", qobject_to_json(QOBJECT(rsp))->str);
    }
    qobject_unref(rsp);
}

static uint64_t dimm_address(QTestState *qts)
{
    QDict *rsp = qtest_qmp(qts, "{'execute': 'query-memory-devices'}");
    QList *devs = qdict_get_qlist(rsp, "return");
    QDict *dimm = qobject_to(QDict, qlist_peek(devs));
    uint64_t addr;

    g_assert_nonnull(dimm);
    addr = qdict_get_int(qdict_get_qdict(dimm, "data"), "addr");
    qobject_unref(rsp);
    return addr;
}

/* Plug a DIMM of @size bytes of hugepages in, as @id; returns its address */
static uint64_t dimm_plug(VblkDev *d, const char *id, uint64_t size)
{
    g_autofree char *mem = g_strdup_printf("mem-%s", id);

    qmp_ok(d->qts, "{'execute': 'object-add', 'arguments': {"
           "'qom-type': 'memory-backend-memfd', 'id': %s,"
           "'size': %" PRIu64 ", 'hugetlb': true}}", mem, size);
    qmp_ok(d->qts, "{'execute': 'device_add', 'arguments': {"
           "'driver': 'pc-dimm', 'id': %s, 'memdev': %s}}", id, mem);
    return dimm_address(d->qts);
}

/* Unplug it the way a guest does: select the slot, eject it; delete it */
static void dimm_unplug(VblkDev *d, const char *id)
{
    g_autofree char *mem = g_strdup_printf("mem-%s", id);

    qmp_ok(d->qts, "{'execute': 'device_del', 'arguments': {'id': %s}}", id);
    qtest_outl(d->qts, 0xa00, 0);
    qtest_outb(d->qts, 0xa14, 8);
    qtest_qmp_eventwait(d->qts, "DEVICE_DELETED");
    qmp_ok(d->qts, "{'execute': 'object-del', 'arguments': {'id': %s}}",
           mem);
}

/*
 * The RAMBlock goes once RCU lets go of it: wait until the registry holds
 * @registered bytes again.  Returns x-query-io-uring-buffers then.
 */
static QDict *wait_registered(VblkDev *d, uint64_t registered)
{
    QDict *info;
    int i;

    for (i = 0; i < 500; i++) {
        info = vblk_fixed_info(d);
        if (qdict_get_int(info, "registered-bytes") == registered) {
            return info;
        }
        qobject_unref(info);
        g_usleep(10 * 1000);
    }
    g_error("the registry still holds more than %" PRIu64 " bytes",
            registered);
}

/*
 * An offset into a freshly plugged DIMM, 4 KiB before the end of one of
 * its hugepages, that no chunk boundary follows within 64 KiB: the DIMM's
 * chunks are those not in @before, and its host mapping may well cross a
 * 1 GiB-aligned address.
 */
static uint64_t dimm_hugepage_edge(VblkDev *d, QDict *before)
{
    g_autoptr(QDict) after = vblk_fixed_info(d);
    g_autoptr(GArray) starts = g_array_new(false, false, sizeof(uint64_t));
    QListEntry *e, *f;
    uint64_t base = UINT64_MAX, off;
    unsigned i;

    QLIST_FOREACH_ENTRY(qdict_get_qlist(after, "chunks"), e) {
        uint64_t start = qdict_get_int(qobject_to(QDict, qlist_entry_obj(e)),
                                       "host-address");
        bool old = false;

        QLIST_FOREACH_ENTRY(qdict_get_qlist(before, "chunks"), f) {
            old |= qdict_get_int(qobject_to(QDict, qlist_entry_obj(f)),
                                 "host-address") == start;
        }
        if (!old) {
            g_array_append_val(starts, start);
            base = MIN(base, start);
        }
    }
    g_assert_cmpuint(starts->len, >=, 1);
    for (off = 2 * MiB - 4096; off < 64 * MiB; off += 2 * MiB) {
        bool clear = true;

        for (i = 0; i < starts->len; i++) {
            uint64_t cut = g_array_index(starts, uint64_t, i) - base;

            clear &= !(cut > off && cut < off + 64 * KiB);
        }
        if (clear) {
            return off;
        }
    }
    g_assert_not_reached();
}

/*
 * Guest RAM that comes and goes: a hugepage-backed DIMM plugged in after
 * the rings exist is registered and used with fixed buffers; ejected and
 * deleted, it leaves the registry, every ring drops it at once (no
 * request needed) and the kernel unpins it.
 */
static void test_hotplug(gconstpointer opaque)
{
    bool clone = GPOINTER_TO_INT(opaque);
    char *image;
    g_autofree char *drive = NULL;
    VblkDev *d;
    QDict *info, *ring;
    VblkSeg seg;
    uint64_t registered, dimm;
    g_autoptr(QDict) before = NULL;
    int reads = 0, writes = 0;

    if (!vblk_have_hugepages(384 * MiB)) {
        g_test_skip("cannot reserve 384 MiB of 2 MiB hugepages");
        return;
    }
    if (!clone) {
        g_setenv("QEMU_IO_URING_FIXED_NO_CLONE", "1", true);
    }
    image = vblk_make_image(DISK_SIZE);
    drive = fixed_drive(image, ",aio-fixed-buffers=on");
    d = vblk_start(256 * MiB, image, 1,
                   "-machine pc,memory-backend=ram0 -m 256M,slots=2,maxmem=1G "
                   "-object memory-backend-memfd,id=ram0,size=256M,"
                   "hugetlb=on,hugetlbsize=2M "
                   "-object iothread,id=io0 %s "
                   "-device virtio-blk-pci,id=vblk0,addr=04.0,drive=disk0,"
                   "iothread=io0", drive);
    g_unsetenv("QEMU_IO_URING_FIXED_NO_CLONE");
    seg = (VblkSeg) { shapes_area(d), MiB };
    vblk_write_pattern(d, 0, 0, &seg, 1, 1);
    vblk_read_verify(d, 0, 0, &seg, 1);
    before = vblk_fixed_info(d);
    registered = qdict_get_int(before, "registered-bytes");

    /* Plug 128 MiB in; the ring learns of it before its next request */
    dimm = dimm_plug(d, "dimm1", 128 * MiB);
    seg = (VblkSeg) { dimm + dimm_hugepage_edge(d, before), 64 * KiB };
    vblk_write_pattern(d, 0, 4 * MiB, &seg, 1, 2);
    vblk_read_verify(d, 0, 4 * MiB, &seg, 1);

    info = vblk_fixed_info(d);
    g_assert_cmpuint(qdict_get_int(info, "registered-bytes"), ==,
                     registered + 128 * MiB);
    ring = vblk_fixed_ring(info, "io0");
    g_test_message("after hot-add: %s", qobject_to_json(QOBJECT(info))->str);
    g_assert_true(qdict_get_bool(ring, "synced"));
    g_assert_cmpint(qdict_get_int(ring, "fixed-writes"), ==, 2);
    g_assert_cmpint(qdict_get_int(ring, "fixed-reads"), ==, 2);
    g_assert_cmpuint(vm_pinned(qtest_pid(d->qts)), ==,
                     qdict_get_int(info, "pinned-bytes"));
    qobject_unref(info);

    /* Once gone, it is gone from the registry, the ring and the kernel */
    dimm_unplug(d, "dimm1");
    info = wait_registered(d, registered);
    ring = vblk_fixed_ring(info, "io0");
    g_assert_true(qdict_get_bool(ring, "synced"));
    g_assert_cmpuint(qdict_get_int(ring, "bytes"), ==, registered);
    g_assert_cmpuint(vm_pinned(qtest_pid(d->qts)), ==, registered);
    qobject_unref(info);

    /* And the rest of RAM still works, fixed */
    run_shapes(d, 0, shapes_area(d), 8 * MiB, 3, &writes, &reads);
    info = vblk_fixed_info(d);
    assert_ring(info, "io0", reads + 2, writes + 2);
    qobject_unref(info);
    vblk_stop(d);
}

/*
 * Make the next QEMU run without CAP_IPC_LOCK and with an RLIMIT_MEMLOCK
 * of @limit bytes (prlimit, then setpriv, then QEMU).  Returns the
 * binary to give limited_qemu_end() once QEMU runs, NULL if impossible.
 */
static char *limited_qemu_begin(uint64_t limit)
{
    g_autofree char *setpriv = g_find_program_in_path("setpriv");
    g_autofree char *prlimit = g_find_program_in_path("prlimit");
    g_autofree char *wrapper = NULL;
    char *qemu;

    if (!setpriv || !prlimit) {
        return NULL;
    }
    qemu = g_strdup(qtest_qemu_binary(NULL));
    wrapper = g_strdup_printf("prlimit --memlock=%" PRIu64 ":%" PRIu64
                              " setpriv --inh-caps=-ipc_lock "
                              "--bounding-set=-ipc_lock %s", limit, limit,
                              qemu);
    g_setenv("QTEST_QEMU_BINARY", wrapper, true);
    return qemu;
}

static void limited_qemu_end(char *qemu)
{
    g_setenv("QTEST_QEMU_BINARY", qemu, true);
    g_free(qemu);
}

/*
 * Without CAP_IPC_LOCK and with a small RLIMIT_MEMLOCK the kernel refuses
 * to pin guest RAM: one warning, the normal path, correct data.
 */
static void test_memlock(void)
{
    g_autofree char *log = NULL;
    g_autofree char *text = NULL;
    char *image;
    g_autofree char *drive = NULL;
    char *saved;
    VblkDev *d;
    QDict *info, *ring;
    int reads = 0, writes = 0;
    int fd;

    saved = limited_qemu_begin(MiB);
    if (!saved) {
        g_test_skip("needs setpriv and prlimit (util-linux)");
        return;
    }
    fd = g_file_open_tmp("vblk-memlock-XXXXXX.log", &log, NULL);
    g_assert(fd >= 0);
    close(fd);
    image = vblk_make_image(DISK_SIZE);
    drive = fixed_drive(image, ",aio-fixed-buffers=on");
    d = vblk_start(256 * MiB, image, 1,
                   "-machine pc -m 256M -object iothread,id=io0 %s "
                   "-device virtio-blk-pci,id=vblk0,addr=04.0,drive=disk0,"
                   "iothread=io0 2>%s", drive, log);
    limited_qemu_end(saved);
    run_shapes(d, 0, shapes_area(d), 0, 1, &writes, &reads);
    info = vblk_fixed_info(d);
    ring = vblk_fixed_ring(info, "io0");
    g_assert_nonnull(ring);
    g_assert_cmpint(qdict_get_int(ring, "fixed-reads") +
                    qdict_get_int(ring, "fixed-writes"), ==, 0);
    g_assert_cmpint(vblk_ring_fallbacks(ring, "not-pinned"), ==,
                    reads + writes);
    qobject_unref(info);
    vblk_stop(d);

    g_assert(g_file_get_contents(log, &text, NULL, NULL));
    g_assert_nonnull(strstr(text, "RLIMIT_MEMLOCK"));
    g_assert_true(strstr(text, "RLIMIT_MEMLOCK") ==
                  g_strrstr(text, "RLIMIT_MEMLOCK"));   /* only once */
    unlink(log);
}

/* Requests of the background load: on both queues, 256 KiB in 4 pieces */
#define LOAD_REQS 32
#define LOAD_SIZE (256 * KiB)

typedef struct Load {
    VblkIo ios[LOAD_REQS];
    VblkSeg segs[LOAD_REQS][4];
    VblkBatch *batch;
    int per_queue[2][2];        /* [queue][read, write] */
} Load;

/*
 * Start writes (or reads, into poisoned buffers) of all of disk
 * [0, LOAD_REQS * LOAD_SIZE) from guest RAM at @gpa, both queues.
 */
static void load_start(VblkDev *d, Load *l, uint64_t gpa, bool write,
                       unsigned gen)
{
    int i;

    for (i = 0; i < LOAD_REQS; i++) {
        vblk_split(l->segs[i], gpa + i * LOAD_SIZE, LOAD_SIZE, 4);
        l->ios[i] = (VblkIo) {
            .q = i % d->nvqs,
            .type = write ? VIRTIO_BLK_T_OUT : VIRTIO_BLK_T_IN,
            .offset = i * LOAD_SIZE, .segs = l->segs[i], .nsegs = 4,
        };
        if (write) {
            vblk_fill(d, &l->ios[i], gen);
        } else {
            vblk_poison(d, &l->ios[i]);
        }
        l->per_queue[i % d->nvqs][write]++;
    }
    l->batch = vblk_batch_start(d, l->ios, LOAD_REQS);
}

/* Wait for the load; every request succeeded, reads found the data */
static void load_wait(VblkDev *d, Load *l)
{
    int i;

    g_test_message("%d of %d requests done when the memory changed",
                   vblk_batch_completed(l->batch), LOAD_REQS);
    vblk_batch_wait(l->batch);
    for (i = 0; i < LOAD_REQS; i++) {
        g_assert_cmpint(l->ios[i].status, ==, VIRTIO_BLK_S_OK);
        if (l->ios[i].type == VIRTIO_BLK_T_IN) {
            vblk_check(d, &l->ios[i]);
        }
    }
}

/*
 * Guest RAM comes and goes while requests are in flight on two rings:
 * three times a hugepage DIMM is plugged in under a load of writes, used,
 * and unplugged under a load of reads.  Every request completes with the
 * right data, all of them as fixed operations; after each change the
 * registry, both rings and the kernel's pin count agree.
 */
static void test_hotplug_load(gconstpointer opaque)
{
    bool clone = GPOINTER_TO_INT(opaque);
    char *image;
    g_autofree char *drive = NULL;
    VblkDev *d;
    QDict *info;
    VblkSeg seg;
    uint64_t registered, area, dimm;
    Load l = { 0 };
    int round, q, extra[2] = { 0 };

    if (!vblk_have_hugepages(384 * MiB)) {
        g_test_skip("cannot reserve 384 MiB of 2 MiB hugepages");
        return;
    }
    if (!clone) {
        g_setenv("QEMU_IO_URING_FIXED_NO_CLONE", "1", true);
    }
    image = vblk_make_image(DISK_SIZE);
    drive = fixed_drive(image, ",aio-fixed-buffers=on");
    d = vblk_start(256 * MiB, image, 2,
                   "-machine pc,memory-backend=ram0 -m 256M,slots=2,maxmem=1G "
                   "-object memory-backend-memfd,id=ram0,size=256M,"
                   "hugetlb=on,hugetlbsize=2M "
                   "-object iothread,id=io0 -object iothread,id=io1 %s "
                   "-device '{\"driver\": \"virtio-blk-pci\", \"id\": "
                   "\"vblk0\", \"addr\": \"04.0\", \"drive\": \"disk0\", "
                   "\"num-queues\": 2, \"iothread-vq-mapping\": "
                   "[{\"iothread\": \"io0\"}, {\"iothread\": \"io1\"}]}'",
                   drive);
    g_unsetenv("QEMU_IO_URING_FIXED_NO_CLONE");
    area = shapes_area(d);
    info = vblk_fixed_info(d);
    registered = qdict_get_int(info, "registered-bytes");
    qobject_unref(info);

    for (round = 0; round < 3; round++) {
        g_autoptr(QDict) before = vblk_fixed_info(d);

        /* Plug in while writes are in flight */
        load_start(d, &l, area, true, 10 + round);
        dimm = dimm_plug(d, "dimm1", 128 * MiB);
        load_wait(d, &l);

        /* The new RAM goes fixed on both rings, next to the old */
        seg = (VblkSeg) { dimm + dimm_hugepage_edge(d, before), 64 * KiB };
        for (q = 0; q < 2; q++) {
            vblk_write_pattern(d, q, 12 * MiB + q * MiB, &seg, 1,
                               20 + round);
            vblk_read_verify(d, q, 12 * MiB + q * MiB, &seg, 1);
            extra[q] += 2;
        }
        info = vblk_fixed_info(d);
        g_assert_cmpuint(qdict_get_int(info, "registered-bytes"), ==,
                         registered + 128 * MiB);
        qobject_unref(info);

        /* Unplug while reads are in flight (none of them in the DIMM) */
        load_start(d, &l, area + 8 * MiB, false, 0);
        dimm_unplug(d, "dimm1");
        load_wait(d, &l);

        info = wait_registered(d, registered);
        for (q = 0; q < 2; q++) {
            QDict *ring = vblk_fixed_ring(info, q ? "io1" : "io0");

            g_assert_true(qdict_get_bool(ring, "synced"));
            g_assert_cmpuint(qdict_get_int(ring, "bytes"), ==, registered);
        }
        g_assert_cmpuint(vm_pinned(qtest_pid(d->qts)), ==,
                         qdict_get_int(info, "pinned-bytes"));
        qobject_unref(info);
    }

    info = vblk_fixed_info(d);
    assert_ring(info, "io0", l.per_queue[0][0] + extra[0] / 2,
                l.per_queue[0][1] + extra[0] / 2);
    assert_ring(info, "io1", l.per_queue[1][0] + extra[1] / 2,
                l.per_queue[1][1] + extra[1] / 2);
    qobject_unref(info);
    vblk_stop(d);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);

    qtest_add_func("/vblk-fixed/hugetlb", test_hugetlb);
    qtest_add_func("/vblk-fixed/small-pages", test_small_pages);
    qtest_add_func("/vblk-fixed/small-requests", test_small_requests);
    qtest_add_func("/vblk-fixed/off", test_off);
    qtest_add_func("/vblk-fixed/chunk-boundary", test_chunk_boundary);
    qtest_add_func("/vblk-fixed/ramblock-boundary", test_ramblock_boundary);
    qtest_add_data_func("/vblk-fixed/iothreads/clone", GINT_TO_POINTER(1),
                        test_iothreads);
    qtest_add_data_func("/vblk-fixed/iothreads/per-ring", GINT_TO_POINTER(0),
                        test_iothreads);
    qtest_add_data_func("/vblk-fixed/hotplug/clone", GINT_TO_POINTER(1),
                        test_hotplug);
    qtest_add_data_func("/vblk-fixed/hotplug/per-ring", GINT_TO_POINTER(0),
                        test_hotplug);
    qtest_add_func("/vblk-fixed/memlock", test_memlock);
    qtest_add_data_func("/vblk-fixed/hotplug-under-load/clone",
                        GINT_TO_POINTER(1), test_hotplug_load);
    qtest_add_data_func("/vblk-fixed/hotplug-under-load/per-ring",
                        GINT_TO_POINTER(0), test_hotplug_load);
    return g_test_run();
}
