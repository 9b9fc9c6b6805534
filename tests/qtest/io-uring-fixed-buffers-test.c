/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * io_uring fixed buffers under virtio-blk: every byte verified, and the
 * x-query-io-uring-buffers counters prove the fixed path ran (or did not,
 * where it must not).
 */

#include "qemu/osdep.h"
#include <sys/resource.h>
#include <sys/vfs.h>
#include <linux/magic.h>
#include "qemu/units.h"
#include "qobject/qdict.h"
#include "qobject/qjson.h"
#include "qobject/qlist.h"
#include "qobject/qstring.h"
#include "standard-headers/linux/virtio_blk.h"
#include "virtio-blk-helpers.h"

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
    const char *block;      /* the RAM block of guest physical 0 */
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

/* Whether two chunks of x-query-io-uring-buffers are the same */
static bool same_chunk(QDict *a, QDict *b)
{
    return g_str_equal(qdict_get_str(a, "ram-block"),
                       qdict_get_str(b, "ram-block")) &&
           qdict_get_int(a, "offset") == qdict_get_int(b, "offset");
}

/* Whether @c is one of the chunks of @before */
static bool old_chunk(QDict *c, QDict *before)
{
    QListEntry *e;

    QLIST_FOREACH_ENTRY(qdict_get_qlist(before, "chunks"), e) {
        if (same_chunk(c, qobject_to(QDict, qlist_entry_obj(e)))) {
            return true;
        }
    }
    return false;
}

/*
 * Find guest RAM among the registered chunks: the RAM block whose chunks
 * add up to @ram_size.  Record where inside it a chunk starts.  (The
 * block's name lives as long as @info.)
 */
static Boundaries ram_chunks(QDict *info, uint64_t ram_size)
{
    QList *list = qdict_get_qlist(info, "chunks");
    QListEntry *e, *f;

    QLIST_FOREACH_ENTRY(list, e) {
        QDict *c = qobject_to(QDict, qlist_entry_obj(e));
        Boundaries b = {
            .block = qdict_get_str(c, "ram-block"),
            .page_size = qdict_get_int(c, "page-size"),
        };
        uint64_t total = 0;

        QLIST_FOREACH_ENTRY(list, f) {
            QDict *g = qobject_to(QDict, qlist_entry_obj(f));
            uint64_t offset = qdict_get_int(g, "offset");

            if (!g_str_equal(qdict_get_str(g, "ram-block"), b.block)) {
                continue;
            }
            total += qdict_get_int(g, "size");
            if (offset && b.n < ARRAY_SIZE(b.gpa)) {
                b.gpa[b.n++] = offset;
            }
        }
        if (total == ram_size) {
            return b;
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

/* Check guest RAM's chunks: pinned, their sizes and their page size */
static void check_ram_chunks(QDict *info, uint64_t ram_size,
                             uint64_t page_size)
{
    QListEntry *e;
    uint64_t seen = 0;
    Boundaries b = ram_chunks(info, ram_size);

    g_assert_cmpuint(b.page_size, ==, page_size);
    QLIST_FOREACH_ENTRY(qdict_get_qlist(info, "chunks"), e) {
        QDict *c = qobject_to(QDict, qlist_entry_obj(e));
        uint64_t start = qdict_get_int(c, "offset");
        uint64_t size = qdict_get_int(c, "size");

        if (!g_str_equal(qdict_get_str(c, "ram-block"), b.block)) {
            continue;
        }
        g_assert_true(qdict_get_bool(c, "pinned"));
        g_assert_cmpuint(size, <=, GiB);
        /*
         * Cut at 1 GiB-aligned host addresses only: every chunk but the
         * first and the last is 1 GiB (where the cuts fall in QEMU's
         * address space, test-io-uring-chunks checks).
         */
        if (start && start + size < ram_size) {
            g_assert_cmpuint(size, ==, GiB);
        }
        g_assert_cmpuint(qdict_get_int(c, "page-size"), ==, page_size);
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

/* Every IoUringFallbackReason, in its order */
static const char *const fallback_reasons[] = {
    "unregistered", "crosses-chunk", "not-pinned", "no-vectored-fixed",
    "ring-disabled", "efault",
};

/* A ring's fallbacks list every reason once, in order, zero or not */
static void assert_fallbacks_listed(QDict *ring)
{
    QListEntry *e;
    int k = 0;

    QLIST_FOREACH_ENTRY(qdict_get_qlist(ring, "fallbacks"), e) {
        QDict *f = qobject_to(QDict, qlist_entry_obj(e));

        g_assert_cmpint(k, <, ARRAY_SIZE(fallback_reasons));
        g_assert_cmpstr(qdict_get_str(f, "reason"), ==, fallback_reasons[k]);
        g_assert_true(qdict_haskey(f, "count"));
        k++;
    }
    g_assert_cmpint(k, ==, ARRAY_SIZE(fallback_reasons));
}

static void assert_ring(QDict *info, const char *name, int reads, int writes)
{
    QDict *ring = vblk_fixed_ring(info, name);

    g_assert_nonnull(ring);
    g_test_message("ring %s: %s", name,
                   qobject_to_json(QOBJECT(ring))->str);
    g_assert_true(qdict_get_bool(ring, "synced"));
    g_assert_false(qdict_haskey(ring, "disabled-reason"));
    assert_fallbacks_listed(ring);
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

/* Whether the host makes transparent hugepages for memory that asks */
static bool have_thp(void)
{
    g_autofree char *enabled = NULL;

    return g_file_get_contents("/sys/kernel/mm/transparent_hugepage/enabled",
                               &enabled, NULL, NULL) &&
           !strstr(enabled, "[never]");
}

/* Whether every chunk of RAM block @block is pinned, and on hugepages */
static bool chunks_huge(QDict *info, const char *block, int *nr)
{
    QListEntry *e;
    bool all = true;

    *nr = 0;
    QLIST_FOREACH_ENTRY(qdict_get_qlist(info, "chunks"), e) {
        QDict *c = qobject_to(QDict, qlist_entry_obj(e));

        if (g_str_equal(qdict_get_str(c, "ram-block"), block)) {
            all = all && qdict_get_bool(c, "pinned") &&
                  qdict_get_bool(c, "hugepages");
            (*nr)++;
        }
    }
    return all;
}

static bool on_tmpfs(const char *path)
{
    struct statfs fs;

    return statfs(path, &fs) == 0 && fs.f_type == TMPFS_MAGIC;
}

/* What guest RAM is */
typedef enum AutoRam {
    RAM_HUGETLB,        /* a memfd on 2 MiB hugetlbfs pages */
    RAM_MEMFD,          /* a memfd on 4 KiB pages, collapsible */
    RAM_ANON,           /* ordinary RAM: anonymous, transparent hugepages */
    RAM_DISK_FILE,      /* a file on a disk file system: no hugepages */
    RAM_TMPFS_PRIVATE,  /* a tmpfs file mapped private: copies on 4 KiB */
} AutoRam;

static const char *const auto_ram[] = {
    [RAM_HUGETLB] = "memory-backend-memfd,id=ram0,size=256M,hugetlb=on,"
                    "hugetlbsize=2M",
    [RAM_MEMFD] = "memory-backend-memfd,id=ram0,size=256M",
    [RAM_ANON] = "memory-backend-ram,id=ram0,size=256M",
    [RAM_DISK_FILE] = "memory-backend-file,id=ram0,size=256M,"
                      "mem-path=/var/tmp",
    [RAM_TMPFS_PRIVATE] = "memory-backend-file,id=ram0,size=256M,"
                          "mem-path=/dev/shm,share=off",
};

typedef struct AutoCase {
    const char *qemu_args;      /* added to the command line */
    const char *drive_opts;     /* added to the file node's options */
    AutoRam ram;
    bool fixed;                 /* whether fixed buffers must be used */
    bool no_clone;              /* a kernel that cannot clone tables */
} AutoCase;

/*
 * aio-fixed-buffers=auto, the default: fixed buffers exactly where guest
 * RAM is locked anyway (-overcommit mem-lock=on, as libvirt's <locked/>
 * gives) and on hugepages once registered (hugetlbfs, or memory that
 * becomes transparent hugepages: anonymous or memfd), with aio=io_uring
 * and cache.direct=on; elsewhere nothing is registered and nothing
 * changes.  With the option off, never.  On 4 KiB pages fixed buffers
 * cost disk requests wherever host memory is not fragmented
 * (docs/benchmarks-kernel.md): auto leaves them off there, locked or not.
 * And on a kernel that cannot clone buffer tables (before Linux 6.12),
 * which the registry takes for one that neither coalesces hugepages (6.10)
 * nor gets RAM collapsed into them.
 */
static void test_auto(gconstpointer opaque)
{
    const AutoCase *c = opaque;
    char *image;
    g_autofree char *drive = NULL;
    VblkDev *d;
    QDict *info;
    int reads = 0, writes = 0;

    if (c->ram == RAM_HUGETLB && !vblk_have_hugepages(256 * MiB)) {
        g_test_skip("cannot reserve 256 MiB of 2 MiB hugepages");
        return;
    }
    if ((c->ram == RAM_MEMFD || c->ram == RAM_ANON ||
         c->ram == RAM_TMPFS_PRIVATE) && !have_thp()) {
        g_test_skip("transparent hugepages are disabled on this host");
        return;
    }
    if (c->ram == RAM_TMPFS_PRIVATE && !on_tmpfs("/dev/shm")) {
        g_test_skip("/dev/shm is not a tmpfs on this host");
        return;
    }
    image = vblk_make_image(DISK_SIZE);
    drive = g_strdup_printf("-blockdev file,node-name=disk0,filename=%s,"
                            "aio=io_uring%s", image, c->drive_opts);
    if (c->no_clone) {
        g_setenv("QEMU_IO_URING_FIXED_NO_CLONE", "1", true);
    }
    d = vblk_start(256 * MiB, image, 1,
                   "-machine pc,memory-backend=ram0 -m 256M "
                   "-object %s %s -object iothread,id=io0 %s "
                   "-device virtio-blk-pci,id=vblk0,addr=04.0,drive=disk0,"
                   "iothread=io0",
                   auto_ram[c->ram], c->qemu_args, drive);
    g_unsetenv("QEMU_IO_URING_FIXED_NO_CLONE");
    /*
     * Where guest RAM lies in QEMU's address space decides whether a
     * 1 GiB-aligned cut falls in it; a request across one goes as two
     * fixed operations, and the counts below are per request.
     */
    run_shapes(d, 0, c->fixed ? shapes_area(d) : d->data_start, 0, 1,
               &writes, &reads);
    info = vblk_fixed_info(d);
    if (c->fixed) {
        int nr;

        assert_ring(info, "io0", reads, writes);
        /* what auto took it for: all on hugepages */
        g_assert_true(chunks_huge(info, "ram0", &nr));
        g_assert_cmpint(nr, >=, 1);
    } else {
        g_assert_cmpuint(qdict_get_int(info, "registered-bytes"), ==, 0);
        g_assert_null(vblk_fixed_ring(info, "io0"));
    }
    qobject_unref(info);
    vblk_stop(d);
}

static const struct {
    const char *name;
    AutoCase c;
} auto_cases[] = {
    { "auto/locked", { "-overcommit mem-lock=on", ",cache.direct=on",
                       RAM_HUGETLB, true } },
    /* Made transparent hugepages before it is pinned */
    { "auto/locked-thp", { "-overcommit mem-lock=on", ",cache.direct=on",
                           RAM_ANON, true } },
    { "auto/locked-memfd", { "-overcommit mem-lock=on", ",cache.direct=on",
                             RAM_MEMFD, true } },
    /* 4 KiB pages: the plain path merges contiguous pages, fixed does not */
    { "auto/locked-4k", { "-overcommit mem-lock=on", ",cache.direct=on",
                          RAM_DISK_FILE, false } },
    /*
     * A tmpfs file, but mapped private: what the guest writes goes to
     * anonymous copies of 4 KiB, which no hugepage of the file backs
     */
    { "auto/locked-tmpfs-private", { "-overcommit mem-lock=on",
                                     ",cache.direct=on", RAM_TMPFS_PRIVATE,
                                     false } },
    /* Before Linux 6.12: hugepages neither coalesced nor collapsed */
    { "auto/locked-no-clone", { "-overcommit mem-lock=on",
                                ",cache.direct=on", RAM_HUGETLB, false,
                                true } },
    { "auto/locked-thp-no-clone", { "-overcommit mem-lock=on",
                                    ",cache.direct=on", RAM_ANON, false,
                                    true } },
    { "auto/unlocked", { "", ",cache.direct=on", RAM_HUGETLB, false } },
    { "auto/unlocked-thp", { "", ",cache.direct=on", RAM_ANON, false } },
    { "auto/locked-cached", { "-overcommit mem-lock=on", "", RAM_HUGETLB,
                              false } },
    /* Locked only once touched: pinning would make all of it resident */
    { "auto/locked-on-fault", { "-overcommit mem-lock=on-fault",
                                ",cache.direct=on", RAM_HUGETLB, false } },
    { "off/locked", { "-overcommit mem-lock=on",
                      ",cache.direct=on,aio-fixed-buffers=off", RAM_HUGETLB,
                      false } },
    { "off/unlocked", { "", ",cache.direct=on,aio-fixed-buffers=off",
                        RAM_HUGETLB, false } },
};

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

    /* Straddling the chunk boundary: one fixed operation each side */
    segs[0] = (VblkSeg) { cut - 4096, 3 * 4096 };
    vblk_write_pattern(d, 0, 3 * MiB, segs, 1, 10);
    vblk_read_verify(d, 0, 3 * MiB, segs, 1);
    /* One segment each side of it: the same */
    segs[0] = (VblkSeg) { cut - 8192, 4096 };
    segs[1] = (VblkSeg) { cut + 4096, 4096 };
    vblk_write_pattern(d, 0, 4 * MiB, segs, 2, 11);
    vblk_read_verify(d, 0, 4 * MiB, segs, 2);
    fixed += 2 * 2;

    info = vblk_fixed_info(d);
    ring = vblk_fixed_ring(info, "io0");
    g_assert_nonnull(ring);
    g_assert_cmpint(qdict_get_int(ring, "fixed-reads"), ==, fixed);
    g_assert_cmpint(qdict_get_int(ring, "fixed-writes"), ==, fixed);
    g_assert_cmpint(vblk_ring_fallbacks(ring, "crosses-chunk"), ==, 0);
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

    /* The segment across both went as one fixed operation per side */
    info = vblk_fixed_info(d);
    ring = vblk_fixed_ring(info, "io0");
    g_assert_nonnull(ring);
    g_assert_cmpint(vblk_ring_fallbacks(ring, "crosses-chunk"), ==, 0);
    g_assert_cmpint(qdict_get_int(ring, "fixed-reads"), ==, 2 + 2);
    g_assert_cmpint(qdict_get_int(ring, "fixed-writes"), ==, 2 + 2);
    qobject_unref(info);
    vblk_stop(d);
}

/*
 * Wherever the pieces of a request lie in guest RAM, it goes fixed: a
 * request across every chunk boundary inside 2 GiB of guest RAM (on 4 KiB
 * pages, no hugepages needed), and one with a piece in every chunk, are
 * cut into one fixed operation per chunk, and nothing falls back.
 */
static void test_every_chunk_boundary(void)
{
    uint64_t ram = 2 * GiB;
    char *image = vblk_make_image(DISK_SIZE);
    g_autofree char *drive = fixed_drive(image, ",aio-fixed-buffers=on");
    VblkSeg segs[8];
    uint64_t offset = 0;
    int k, n = 0, parts = 0;
    VblkDev *d;
    QDict *info, *ring;
    Boundaries b;

    d = vblk_start(ram, image, 1,
                   "-machine pc,memory-backend=ram0 -m 2G "
                   "-object memory-backend-memfd,id=ram0,size=2G "
                   "-object iothread,id=io0 %s "
                   "-device virtio-blk-pci,id=vblk0,addr=04.0,drive=disk0,"
                   "iothread=io0", drive);
    info = vblk_fixed_info(d);
    b = ram_chunks(info, ram);
    qobject_unref(info);
    /* Clear of the low RAM the test's allocator hands out */
    segs[n++] = (VblkSeg) { 64 * MiB, 4096 };
    for (k = 0; k < b.n; k++) {
        VblkSeg across = { b.gpa[k] - 8192, 4 * 4096 };

        if (b.gpa[k] < 128 * MiB) {
            continue;
        }
        vblk_write_pattern(d, 0, offset, &across, 1, 30 + k);
        vblk_read_verify(d, 0, offset, &across, 1);
        offset += MiB;
        parts += 2;
        /* A piece just inside each chunk after a boundary */
        segs[n++] = (VblkSeg) { b.gpa[k] + 4096, 4096 };
    }
    g_assert_cmpint(n, >=, 2);      /* 2 GiB holds a 1 GiB-aligned address */
    vblk_write_pattern(d, 0, offset, segs, n, 40);
    vblk_read_verify(d, 0, offset, segs, n);
    parts += n;

    info = vblk_fixed_info(d);
    ring = vblk_fixed_ring(info, "io0");
    g_assert_nonnull(ring);
    g_assert_cmpint(qdict_get_int(ring, "fixed-reads"), ==, parts);
    g_assert_cmpint(qdict_get_int(ring, "fixed-writes"), ==, parts);
    for (k = 0; k < ARRAY_SIZE(fallback_reasons); k++) {
        g_assert_cmpint(vblk_ring_fallbacks(ring, fallback_reasons[k]), ==, 0);
    }
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
 * 256 MiB of hugepage guest RAM (@mem_opts completes -m 256M) and two
 * queues on two iothreads, each with its own ring; with @clone, the rings
 * clone one pinned buffer table, otherwise each pins guest RAM itself.
 * @args are more arguments for QEMU.
 */
static VblkDev *start_two_iothreads(bool clone, const char *mem_opts,
                                    const char *args)
{
    char *image = vblk_make_image(DISK_SIZE);
    g_autofree char *drive = fixed_drive(image, ",aio-fixed-buffers=on");
    VblkDev *d;

    if (!clone) {
        g_setenv("QEMU_IO_URING_FIXED_NO_CLONE", "1", true);
    }
    d = vblk_start(256 * MiB, image, 2,
                   "-machine pc,memory-backend=ram0 -m 256M%s "
                   "-object memory-backend-memfd,id=ram0,size=256M,"
                   "hugetlb=on,hugetlbsize=2M "
                   "-object iothread,id=io0 -object iothread,id=io1 %s "
                   "-device '{\"driver\": \"virtio-blk-pci\", \"id\": "
                   "\"vblk0\", \"addr\": \"04.0\", \"drive\": \"disk0\", "
                   "\"num-queues\": 2, \"iothread-vq-mapping\": "
                   "[{\"iothread\": \"io0\"}, {\"iothread\": \"io1\"}]}' %s",
                   mem_opts, drive, args);
    g_unsetenv("QEMU_IO_URING_FIXED_NO_CLONE");
    return d;
}

/*
 * Every request shape on each of the two queues of start_two_iothreads(),
 * one per ring, then assert that each ring did them all as fixed I/O.
 * Returns the monitor's view for more checks; the caller unrefs it.
 */
static QDict *run_shapes_two_rings(VblkDev *d)
{
    int reads[2] = { 0 }, writes[2] = { 0 };
    QDict *info;
    unsigned q;

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
    return info;
}

/*
 * Two iothreads, one queue each: both rings do fixed I/O.  With cloning,
 * guest RAM is pinned once; without, once per ring.
 */
static void test_iothreads(gconstpointer opaque)
{
    bool clone = GPOINTER_TO_INT(opaque);
    VblkDev *d;
    QDict *info;
    uint64_t registered, pinned;

    if (!vblk_have_hugepages(256 * MiB)) {
        g_test_skip("cannot reserve 256 MiB of 2 MiB hugepages");
        return;
    }
    d = start_two_iothreads(clone, "", "");
    info = run_shapes_two_rings(d);
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

/* How many lines of the trace log at @path are of @event */
static int trace_count(const char *path, const char *event)
{
    g_autofree char *text = NULL;
    g_autofree char *word = g_strdup_printf("uring_fixed_%s ", event);
    const char *p;
    int n = 0;

    g_assert(g_file_get_contents(path, &text, NULL, NULL));
    for (p = strstr(text, word); p; p = strstr(p + 1, word)) {
        n++;
    }
    return n;
}

/*
 * The machine's start registers all of its RAM blocks, guest RAM, ROMs
 * and video RAM, a dozen of them, each in its own call.  They are pinned
 * in one call that registers a table whole: into the pin table with
 * cloning, once per ring without.  Never slot by slot, which costs the
 * kernel a walk over the whole table per hugepage; and every request
 * still goes fixed.
 */
static void test_start_pins_whole(gconstpointer opaque)
{
    bool clone = GPOINTER_TO_INT(opaque);
    g_autofree char *log = NULL;
    g_autofree char *args = NULL;
    VblkDev *d;
    int fd;

    if (!vblk_have_hugepages(256 * MiB)) {
        g_test_skip("cannot reserve 256 MiB of 2 MiB hugepages");
        return;
    }
    fd = g_file_open_tmp("vblk-trace-XXXXXX", &log, NULL);
    g_assert_cmpint(fd, >=, 0);
    close(fd);
    args = g_strdup_printf("-trace enable=uring_fixed_register_table "
                           "-trace enable=uring_fixed_update_slot "
                           "-trace enable=uring_fixed_register -D %s", log);
    d = start_two_iothreads(clone, "", args);
    qobject_unref(run_shapes_two_rings(d));

    /* Before the exit, which unregisters slot by slot (no pinning there) */
    g_test_message("RAM blocks registered: %d",
                   trace_count(log, "register"));
    g_assert_cmpint(trace_count(log, "register"), >, 1);
    g_assert_cmpint(trace_count(log, "register_table"), ==, clone ? 1 : 2);
    g_assert_cmpint(trace_count(log, "update_slot"), ==, 0);
    vblk_stop(d);
    unlink(log);
}

/*
 * Pinning guest RAM holds up no thread the monitor needs: QEMU pins it in
 * a thread of its own.  4 GiB of small pages (shared memory, which gets
 * no transparent hugepages here) take seconds to fault in and pin, and
 * the monitor answers meanwhile, saying that it pins.  QEMU before pinned
 * it all in the main loop with the BQL held, before its first answer
 * (2.9-12.3 s for 8 GiB here), and had no such field.
 */
static void test_monitor_while_pinning(void)
{
    char *image = vblk_make_image(DISK_SIZE);
    g_autofree char *drive = fixed_drive(image, ",aio-fixed-buffers=on");
    gint64 start, t, slowest = 0;
    int answers = 0;
    QTestState *qts;
    QDict *rsp, *info;
    bool pinning;

    qts = qtest_initf("-machine pc,memory-backend=ram0 -m 4G "
                      "-object memory-backend-memfd,id=ram0,size=4G %s "
                      "-device virtio-blk-pci,drive=disk0", drive);
    start = g_get_monotonic_time();
    rsp = qtest_qmp(qts, "{'execute': 'x-query-io-uring-buffers'}");
    info = qdict_get_qdict(rsp, "return");
    if (!qdict_get_bool(info, "clone-buffers")) {
        /* Each ring pins for itself, in its own thread */
        g_test_skip("the kernel cannot clone buffer tables (Linux < 6.12)");
        qobject_unref(rsp);
        goto out;
    }
    pinning = qdict_get_bool(info, "pinning");
    g_assert_true(pinning);
    qobject_unref(rsp);

    while (pinning) {
        t = g_get_monotonic_time();
        qobject_unref(qtest_qmp(qts, "{'execute': 'query-status'}"));
        slowest = MAX(slowest, g_get_monotonic_time() - t);
        answers++;
        rsp = qtest_qmp(qts, "{'execute': 'x-query-io-uring-buffers'}");
        info = qdict_get_qdict(rsp, "return");
        pinning = qdict_get_bool(info, "pinning");
        if (!pinning) {
            /* All of guest RAM pinned in the end */
            g_assert_cmpuint(qdict_get_int(info, "pinned-bytes"), >=, 4 * GiB);
        }
        qobject_unref(rsp);
        g_assert_cmpint(g_get_monotonic_time() - start, <, VBLK_TIMEOUT_US);
        g_usleep(10 * 1000);
    }
    g_test_message("pinned 4 GiB in %" PRId64 " ms; the monitor answered "
                   "%d times meanwhile, the slowest in %" PRId64 " us",
                   (g_get_monotonic_time() - start) / 1000, answers, slowest);
out:
    qtest_quit(qts);
    unlink(image);
    g_free(image);
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
    vblk_wait_pinned(d->qts);
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
    QListEntry *e;
    uint64_t base = UINT64_MAX, off;
    unsigned i;

    QLIST_FOREACH_ENTRY(qdict_get_qlist(after, "chunks"), e) {
        QDict *c = qobject_to(QDict, qlist_entry_obj(e));
        uint64_t start = qdict_get_int(c, "offset");

        if (!old_chunk(c, before)) {
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
 * of @limit bytes (prlimit, then setpriv, then QEMU).  io_uring charges
 * what it pins, and the memory of every ring, to the *user*
 * (user_struct.locked_vm) and checks that sum against the limit of the
 * process that registers; so QEMU runs as a user ID of its own, where no
 * other process (another test's limited QEMU, or our previous QEMU, whose
 * rings the kernel frees asynchronously) counts.  It keeps
 * CAP_DAC_OVERRIDE to open the image and the qtest sockets.
 *
 * Returns the binary to give limited_qemu_end() once QEMU runs, NULL if
 * impossible: no setpriv or prlimit, or @limit above a hard limit this
 * process cannot raise (without CAP_SYS_RESOURCE; prlimit would fail
 * before QEMU starts, and qtest wait 50 s for a connection).
 */
static char *limited_qemu_begin(uint64_t limit)
{
    static unsigned runs;
    g_autofree char *setpriv = g_find_program_in_path("setpriv");
    g_autofree char *prlimit = g_find_program_in_path("prlimit");
    g_autofree char *probe = NULL;
    g_autofree char *wrapper = NULL;
    unsigned uid = 0x40000000 + ((getpid() & 0x3fffff) << 6) + (runs++ & 63);
    int status;
    char *qemu;

    if (!setpriv || !prlimit) {
        return NULL;
    }
    probe = g_strdup_printf("prlimit --memlock=%" PRIu64 ":%" PRIu64 " true",
                            limit, limit);
    if (!g_spawn_command_line_sync(probe, NULL, NULL, &status, NULL) ||
        !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        return NULL;
    }
    qemu = g_strdup(qtest_qemu_binary(NULL));
    wrapper = g_strdup_printf("prlimit --memlock=%" PRIu64 ":%" PRIu64
                              " setpriv --reuid=%u --regid=%u --clear-groups "
                              "--inh-caps=-all,+dac_override "
                              "--ambient-caps=-all,+dac_override "
                              "--bounding-set=-ipc_lock %s",
                              limit, limit, uid, uid, qemu);
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
        g_test_skip("needs setpriv and prlimit (util-linux) and a hard "
                    "RLIMIT_MEMLOCK of 1 MiB");
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

/* Requests of the background load: on both queues, 4 pieces each */
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
 * [0, LOAD_REQS * @size) from guest RAM at @gpa, both queues, requests
 * of @size bytes.
 */
static void load_start(VblkDev *d, Load *l, uint64_t gpa, uint32_t size,
                       bool write, unsigned gen)
{
    int i;

    for (i = 0; i < LOAD_REQS; i++) {
        vblk_split(l->segs[i], gpa + i * size, size, 4);
        l->ios[i] = (VblkIo) {
            .q = i % d->nvqs,
            .type = write ? VIRTIO_BLK_T_OUT : VIRTIO_BLK_T_IN,
            .offset = i * size, .segs = l->segs[i], .nsegs = 4,
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
                   vblk_batch_poll(l->batch), LOAD_REQS);
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
    d = start_two_iothreads(clone, ",slots=2,maxmem=1G", "");
    area = shapes_area(d);
    info = vblk_fixed_info(d);
    registered = qdict_get_int(info, "registered-bytes");
    qobject_unref(info);

    for (round = 0; round < 3; round++) {
        g_autoptr(QDict) before = vblk_fixed_info(d);

        /* Plug in while writes are in flight */
        load_start(d, &l, area, LOAD_SIZE, true, 10 + round);
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
        load_start(d, &l, area + 8 * MiB, LOAD_SIZE, false, 0);
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

/*
 * What io_uring charges to the user's locked memory for the rings of
 * process @pid, besides registered buffers: each ring's SQEs (64 bytes
 * each) and its rings region (16 bytes a CQE, 4 a SQ array entry, and a
 * header of less than 256 bytes), in whole pages.
 */
static uint64_t rings_memlock(pid_t pid)
{
    g_autofree char *dir = g_strdup_printf("/proc/%d/fd", pid);
    GDir *fds = g_dir_open(dir, 0, NULL);
    const char *name;
    uint64_t total = 0;

    g_assert_nonnull(fds);
    while ((name = g_dir_read_name(fds))) {
        g_autofree char *link = g_build_filename(dir, name, NULL);
        g_autofree char *target = g_file_read_link(link, NULL);
        g_autofree char *path = NULL;
        g_autofree char *info = NULL;
        char *sq, *cq;
        uint64_t sqes, cqes;

        if (g_strcmp0(target, "anon_inode:[io_uring]")) {
            continue;
        }
        path = g_strdup_printf("/proc/%d/fdinfo/%s", pid, name);
        g_assert(g_file_get_contents(path, &info, NULL, NULL));
        sq = strstr(info, "SqMask:");
        cq = strstr(info, "CqMask:");
        g_assert(sq && cq);
        sqes = g_ascii_strtoull(sq + strlen("SqMask:"), NULL, 0) + 1;
        cqes = g_ascii_strtoull(cq + strlen("CqMask:"), NULL, 0) + 1;
        total += QEMU_ALIGN_UP(sqes * 64, 4096) +
                 QEMU_ALIGN_UP(256 + cqes * 16 + sqes * 4, 4096);
    }
    g_dir_close(fds);
    return total;
}

/* How often @needle occurs in @text */
static int count_of(const char *text, const char *needle)
{
    int n = 0;

    for (text = strstr(text, needle); text; text = strstr(text + 1, needle)) {
        n++;
    }
    return n;
}

static int log_count(const char *log, const char *needle)
{
    g_autofree char *text = NULL;

    g_assert(g_file_get_contents(log, &text, NULL, NULL));
    return count_of(text, needle);
}

/*
 * Base guest RAM of one 2 MiB hugepage, a DIMM of 16 MiB of them: the
 * limit leaves less than a hugepage free once base RAM is pinned.
 */
#define ML_RAM (2 * MiB)
#define ML_DIMM (16 * MiB)
#define ML_LOAD_SIZE (16 * KiB)
#define ML_WRITES (1 * MiB)             /* guest RAM of the write load */
#define ML_READS (ML_WRITES + 512 * KiB) /* of the read load, and more */

/*
 * QEMU for the memlock-hotplug case, stderr to @log: two queues, on two
 * IOThreads when guest RAM is pinned once and cloned, else on one (each
 * ring pins base RAM for itself, and two of them would not fit in the
 * usual hard limit of 8 MiB: 2 MiB of RAM, 2 MiB of ACPI tables' ROM and
 * 384 KiB of firmware, each)
 */
static VblkDev *ml_start(bool clone, const char *log)
{
    char *image = vblk_make_image(DISK_SIZE);
    g_autofree char *drive = fixed_drive(image, ",aio-fixed-buffers=on");
    VblkDev *d;

    if (!clone) {
        g_setenv("QEMU_IO_URING_FIXED_NO_CLONE", "1", true);
    }
    d = vblk_start(ML_RAM, image, 2,
                   "-nodefaults -machine pc,memory-backend=ram0 "
                   "-m 2M,slots=2,maxmem=1G "
                   "-object memory-backend-memfd,id=ram0,size=2M,"
                   "hugetlb=on,hugetlbsize=2M "
                   "-object iothread,id=io0 -object iothread,id=io1 %s "
                   "-device '{\"driver\": \"virtio-blk-pci\", \"id\": "
                   "\"vblk0\", \"addr\": \"04.0\", \"drive\": \"disk0\", "
                   "\"num-queues\": 2, \"iothread-vq-mapping\": "
                   "[{\"iothread\": \"io0\"}%s]}' 2>%s", drive,
                   clone ? ", {\"iothread\": \"io1\"}" : "", log);
    g_unsetenv("QEMU_IO_URING_FIXED_NO_CLONE");
    return d;
}

/* One write and one read of 64 KiB of base RAM on each queue */
static void ml_base_io(VblkDev *d, unsigned gen)
{
    VblkSeg seg = { ML_READS, 64 * KiB };
    unsigned q;

    for (q = 0; q < 2; q++) {
        vblk_write_pattern(d, q, MiB + q * 64 * KiB, &seg, 1, gen + q);
        vblk_read_verify(d, q, MiB + q * 64 * KiB, &seg, 1);
    }
}

/* Every chunk of @info not in @before is the DIMM's; how many */
static int ml_dimm_chunks(QDict *info, QDict *before, bool clone,
                          uint64_t *bytes)
{
    QListEntry *e;
    int n = 0;

    *bytes = 0;
    QLIST_FOREACH_ENTRY(qdict_get_qlist(info, "chunks"), e) {
        QDict *c = qobject_to(QDict, qlist_entry_obj(e));

        if (old_chunk(c, before)) {
            continue;
        }
        /* Pinned once for all rings: refused.  Per ring: each refused. */
        g_assert_cmpint(qdict_get_bool(c, "pinned"), ==, !clone);
        g_assert_cmpuint(qdict_get_int(c, "page-size"), ==, 2 * MiB);
        *bytes += qdict_get_int(c, "size");
        n++;
    }
    return n;
}

/*
 * RLIMIT_MEMLOCK (QEMU without CAP_IPC_LOCK) that holds base guest RAM
 * but not a hugepage more: a hugepage DIMM plugged in while writes are in
 * flight cannot be pinned.  Every request completes with the right data;
 * on base RAM still fixed, on the DIMM the normal way (not-pinned); one
 * warning.  Unplugged while reads are in flight, the registry, both rings
 * and the kernel's pin count are back to base RAM.  Twice.
 *
 * The limit is computed, not guessed: a first QEMU, identical but with
 * the hard limit, shows what base RAM costs once its rings have synced
 * (VmPin: buffers; /proc/PID/fdinfo: the rings' own memory, charged to
 * the same count); the second gets that plus 1 MiB, less than any piece
 * of the DIMM (a multiple of 2 MiB even when a 1 GiB boundary cuts it).
 */
static void test_memlock_hotplug(gconstpointer opaque)
{
    bool clone = GPOINTER_TO_INT(opaque);
    g_autofree char *log = NULL;
    struct rlimit rl;
    uint64_t hard, limit, rings, pinned, registered, dimm_bytes, dimm;
    uint64_t probe_rings = 4 * 4096;    /* two transient 1-entry rings */
    char *saved;
    VblkDev *d;
    QDict *info;
    VblkSeg seg, segs[4];
    Load l = { 0 };
    int nr_rings = clone ? 2 : 1;
    int round, q, fd, fixed[2][2] = { { 0 } }, not_pinned[2] = { 0 };

    if (!vblk_have_hugepages(ML_RAM + ML_DIMM)) {
        g_test_skip("cannot reserve 18 MiB of 2 MiB hugepages");
        return;
    }
    g_assert_cmpint(getrlimit(RLIMIT_MEMLOCK, &rl), ==, 0);
    hard = rl.rlim_max == RLIM_INFINITY ? 64 * MiB : rl.rlim_max;
    fd = g_file_open_tmp("vblk-memlock-XXXXXX.log", &log, NULL);
    g_assert(fd >= 0);
    close(fd);

    /* What base RAM costs, at the hard limit */
    saved = limited_qemu_begin(hard);
    if (!saved) {
        g_test_skip("needs setpriv and prlimit (util-linux)");
        unlink(log);
        return;
    }
    d = ml_start(clone, log);
    limited_qemu_end(saved);
    ml_base_io(d, 1);
    info = vblk_fixed_info(d);
    registered = qdict_get_int(info, "registered-bytes");
    pinned = qdict_get_int(info, "pinned-bytes");
    rings = rings_memlock(qtest_pid(d->qts));
    g_test_message("at the hard limit: %s",
                   qobject_to_json(QOBJECT(info))->str);
    for (q = 0; q < nr_rings; q++) {
        QDict *ring = vblk_fixed_ring(info, q ? "io1" : "io0");

        g_assert_nonnull(ring);
        if (qdict_get_int(ring, "bytes") != registered) {
            g_test_skip("the hard RLIMIT_MEMLOCK cannot hold base RAM");
            qobject_unref(info);
            vblk_stop(d);
            unlink(log);
            return;
        }
    }
    g_assert_cmpuint(vm_pinned(qtest_pid(d->qts)), ==, pinned);
    qobject_unref(info);
    vblk_stop(d);
    limit = pinned + rings + probe_rings + MiB;
    g_test_message("base RAM pins %" PRIu64 " KiB, rings %" PRIu64
                   " KiB: RLIMIT_MEMLOCK %" PRIu64 " KiB", pinned / KiB,
                   rings / KiB, limit / KiB);

    saved = limited_qemu_begin(limit);
    if (!saved) {
        g_test_skip("the hard RLIMIT_MEMLOCK is below what base RAM needs");
        unlink(log);
        return;
    }
    d = ml_start(clone, log);
    limited_qemu_end(saved);
    ml_base_io(d, 2);
    for (q = 0; q < 2; q++) {
        fixed[q % nr_rings][0]++;
        fixed[q % nr_rings][1]++;
    }
    info = vblk_fixed_info(d);
    g_assert_cmpuint(qdict_get_int(info, "registered-bytes"), ==, registered);
    g_assert_cmpuint(qdict_get_int(info, "pinned-bytes"), ==, pinned);
    g_assert_cmpuint(vm_pinned(qtest_pid(d->qts)), ==, pinned);
    g_assert_cmpuint(rings_memlock(qtest_pid(d->qts)), ==, rings);
    qobject_unref(info);
    g_assert_cmpint(log_count(log, "warning:"), ==, 0);

    for (round = 0; round < 2; round++) {
        g_autoptr(QDict) before = vblk_fixed_info(d);

        /* Plug in while writes are in flight: the kernel refuses it */
        load_start(d, &l, ML_WRITES, ML_LOAD_SIZE, true, 10 + round);
        dimm = dimm_plug(d, "dimm1", ML_DIMM);
        load_wait(d, &l);
        for (q = 0; q < 2; q++) {
            fixed[q % nr_rings][1] += LOAD_REQS / 2;
        }

        /* The DIMM goes the normal way, one and four segments */
        seg = (VblkSeg) { dimm + dimm_hugepage_edge(d, before), 64 * KiB };
        for (q = 0; q < 2; q++) {
            uint64_t off = 4 * MiB + q * MiB;

            vblk_write_pattern(d, q, off, &seg, 1, 20 + round);
            vblk_read_verify(d, q, off, &seg, 1);
            vblk_split(segs, seg.gpa, seg.len, 4);
            vblk_write_pattern(d, q, off + 128 * KiB, segs, 4, 30 + round);
            vblk_read_verify(d, q, off + 128 * KiB, segs, 4);
            not_pinned[q % nr_rings] += 4;
        }
        /* Base RAM beside it still goes fixed */
        ml_base_io(d, 40 + round);
        for (q = 0; q < 2; q++) {
            fixed[q % nr_rings][0]++;
            fixed[q % nr_rings][1]++;
        }

        info = vblk_fixed_info(d);
        g_test_message("with the DIMM: %s",
                       qobject_to_json(QOBJECT(info))->str);
        g_assert_cmpuint(qdict_get_int(info, "registered-bytes"), ==,
                         registered + ML_DIMM);
        g_assert_cmpint(ml_dimm_chunks(info, before, clone, &dimm_bytes),
                        >=, 1);
        g_assert_cmpuint(dimm_bytes, ==, ML_DIMM);
        g_assert_cmpuint(qdict_get_int(info, "pinned-bytes"), ==, pinned);
        for (q = 0; q < nr_rings; q++) {
            QDict *ring = vblk_fixed_ring(info, q ? "io1" : "io0");

            g_assert_true(qdict_get_bool(ring, "synced"));
            g_assert_false(qdict_haskey(ring, "disabled-reason"));
            g_assert_cmpuint(qdict_get_int(ring, "bytes"), ==, registered);
            g_assert_cmpint(vblk_ring_fallbacks(ring, "not-pinned"), ==,
                            not_pinned[q]);
        }
        g_assert_cmpuint(vm_pinned(qtest_pid(d->qts)), ==, pinned);
        qobject_unref(info);
        /* One warning, naming the limit, however many refusals */
        g_assert_cmpint(log_count(log, "warning:"), ==, 1);
        g_assert_cmpint(log_count(log, "RLIMIT_MEMLOCK"), ==, 1);

        /* Unplug while reads are in flight (none of them in the DIMM) */
        load_start(d, &l, ML_READS, ML_LOAD_SIZE, false, 0);
        dimm_unplug(d, "dimm1");
        load_wait(d, &l);
        for (q = 0; q < 2; q++) {
            fixed[q % nr_rings][0] += LOAD_REQS / 2;
        }

        info = wait_registered(d, registered);
        g_assert_cmpuint(qdict_get_int(info, "pinned-bytes"), ==, pinned);
        for (q = 0; q < nr_rings; q++) {
            QDict *ring = vblk_fixed_ring(info, q ? "io1" : "io0");

            g_assert_true(qdict_get_bool(ring, "synced"));
            g_assert_cmpuint(qdict_get_int(ring, "bytes"), ==, registered);
        }
        g_assert_cmpuint(vm_pinned(qtest_pid(d->qts)), ==, pinned);
        qobject_unref(info);
    }

    /* Every request on base RAM was fixed, every one on the DIMM not */
    ml_base_io(d, 50);
    for (q = 0; q < 2; q++) {
        fixed[q % nr_rings][0]++;
        fixed[q % nr_rings][1]++;
    }
    info = vblk_fixed_info(d);
    for (q = 0; q < nr_rings; q++) {
        QDict *ring = vblk_fixed_ring(info, q ? "io1" : "io0");

        g_test_message("ring io%d: %s", q,
                       qobject_to_json(QOBJECT(ring))->str);
        g_assert_cmpint(qdict_get_int(ring, "fixed-reads"), ==,
                        fixed[q][0]);
        g_assert_cmpint(qdict_get_int(ring, "fixed-writes"), ==,
                        fixed[q][1]);
        g_assert_cmpint(vblk_ring_fallbacks(ring, "not-pinned"), ==,
                        not_pinned[q]);
        g_assert_cmpint(vblk_ring_fallbacks(ring, "unregistered"), ==, 0);
        g_assert_cmpint(vblk_ring_fallbacks(ring, "crosses-chunk"), ==, 0);
        g_assert_cmpint(vblk_ring_fallbacks(ring, "efault"), ==, 0);
    }
    qobject_unref(info);
    vblk_stop(d);
    g_assert_cmpint(log_count(log, "warning:"), ==, 1);
    unlink(log);
}

/*
 * Ordinary RAM (memory-backend-ram), locked as libvirt's <locked/> does:
 * QEMU asks for transparent hugepages before it locks boot RAM, so its
 * chunks are on hugepages.  A DIMM plugged in later is locked, and so
 * faulted in, as it is mapped, before QEMU's MADV_HUGEPAGE: on small
 * pages, which the kernel describes with one bvec each.  Its registration
 * collapses them into hugepages first (MADV_COLLAPSE), and the query says
 * so.  Before that: not one of its chunks on hugepages.
 *
 * Unlocked (@opaque false), the guest has not written most of its RAM
 * yet: registration faults it in first, as hugepages, as pinning would
 * have done after it (and the kernel collapses nothing never faulted in).
 * Before that: chunks of pages not there yet, laid out and reported as
 * small pages.  (Under AddressSanitizer, whose mlockall() does nothing,
 * the locked case is this one too.)
 */
static void test_thp(const void *opaque)
{
    bool locked = GPOINTER_TO_INT(opaque);
    char *image;
    g_autofree char *drive = NULL;
    VblkDev *d;
    QDict *info;
    int nr;

    if (!have_thp()) {
        g_test_skip("transparent hugepages are disabled on this host");
        return;
    }
    image = vblk_make_image(DISK_SIZE);
    drive = fixed_drive(image, ",aio-fixed-buffers=on");
    d = vblk_start(256 * MiB, image, 1,
                   "%s"
                   "-machine pc,memory-backend=ram0 -m 256M,slots=2,maxmem=1G "
                   "-object memory-backend-ram,id=ram0,size=256M "
                   "-object iothread,id=io0 %s "
                   "-device virtio-blk-pci,id=vblk0,addr=04.0,drive=disk0,"
                   "iothread=io0", locked ? "-overcommit mem-lock=on " : "",
                   drive);
    info = vblk_fixed_info(d);
    g_assert_true(chunks_huge(info, "ram0", &nr));
    g_assert_cmpint(nr, >=, 1);
    qobject_unref(info);

    qmp_ok(d->qts, "{'execute': 'object-add', 'arguments': {"
           "'qom-type': 'memory-backend-ram', 'id': 'mem-dimm0',"
           "'size': %" PRIu64 "}}", (uint64_t)(128 * MiB));
    qmp_ok(d->qts, "{'execute': 'device_add', 'arguments': {"
           "'driver': 'pc-dimm', 'id': 'dimm0', 'memdev': 'mem-dimm0'}}");
    vblk_wait_pinned(d->qts);
    info = vblk_fixed_info(d);
    g_assert_true(chunks_huge(info, "mem-dimm0", &nr));
    g_assert_cmpint(nr, >=, 1);
    qobject_unref(info);

    /* And I/O into it goes fixed */
    {
        VblkSeg seg = { dimm_address(d->qts) + 4 * MiB, 2 * MiB };

        vblk_write_pattern(d, 0, 0, &seg, 1, 7);
        vblk_read_verify(d, 0, 0, &seg, 1);
    }
    info = vblk_fixed_info(d);
    g_assert_cmpint(qdict_get_int(vblk_fixed_ring(info, "io0"),
                                  "fixed-reads"), >=, 1);
    qobject_unref(info);
    vblk_stop(d);
}

/*
 * Ordinary locked RAM whose last 1 MiB cannot become a hugepage (its
 * 2 MiB piece would reach past the RAM block), as with -m 257M: the first
 * 256 MiB are made hugepages, the tail stays on small pages.  The kernel
 * coalesces a buffer only if all of it is hugepages, so the tail is a
 * buffer of its own, reported as small pages, and the rest is laid out in
 * buffers reported as hugepages.  Both take fixed I/O.
 */
static void test_thp_partial(void)
{
    const uint64_t whole = 256 * MiB, tail = 1 * MiB;
    char *image;
    g_autofree char *drive = NULL;
    VblkDev *d;
    QDict *info;
    QListEntry *e;
    uint64_t huge = 0, small = 0;
    int nr_small = 0;

    if (!have_thp()) {
        g_test_skip("transparent hugepages are disabled on this host");
        return;
    }
    image = vblk_make_image(DISK_SIZE);
    drive = fixed_drive(image, ",aio-fixed-buffers=on");
    d = vblk_start(whole + tail, image, 1,
                   "-overcommit mem-lock=on "
                   "-machine pc,memory-backend=ram0 -m 257M "
                   "-object memory-backend-ram,id=ram0,size=257M "
                   "-object iothread,id=io0 %s "
                   "-device virtio-blk-pci,id=vblk0,addr=04.0,drive=disk0,"
                   "iothread=io0", drive);
    info = vblk_fixed_info(d);
    QLIST_FOREACH_ENTRY(qdict_get_qlist(info, "chunks"), e) {
        QDict *c = qobject_to(QDict, qlist_entry_obj(e));
        uint64_t offset = qdict_get_int(c, "offset");
        uint64_t size = qdict_get_int(c, "size");

        if (!g_str_equal(qdict_get_str(c, "ram-block"), "ram0")) {
            continue;
        }
        g_test_message("chunk at %" PRIu64 " MiB, %" PRIu64 " KiB: %s",
                       offset / MiB, size / KiB,
                       qdict_get_bool(c, "hugepages") ? "hugepages" : "small");
        g_assert_true(qdict_get_bool(c, "pinned"));
        if (qdict_get_bool(c, "hugepages")) {
            g_assert_cmpuint(offset + size, <=, whole);
            huge += size;
        } else {
            g_assert_cmpuint(offset, >=, whole);
            small += size;
            nr_small++;
        }
    }
    qobject_unref(info);
    g_assert_cmpuint(huge, ==, whole);
    g_assert_cmpuint(small, ==, tail);
    g_assert_cmpint(nr_small, ==, 1);

    /* I/O into either part goes fixed */
    {
        VblkSeg head = { 128 * MiB, 2 * MiB };
        VblkSeg end = { whole, tail };

        vblk_write_pattern(d, 0, 0, &head, 1, 7);
        vblk_read_verify(d, 0, 0, &head, 1);
        vblk_write_pattern(d, 0, 4 * MiB, &end, 1, 8);
        vblk_read_verify(d, 0, 4 * MiB, &end, 1);
    }
    info = vblk_fixed_info(d);
    g_assert_cmpint(qdict_get_int(vblk_fixed_ring(info, "io0"),
                                  "fixed-reads"), ==, 2);
    g_assert_cmpint(qdict_get_int(vblk_fixed_ring(info, "io0"),
                                  "fixed-writes"), ==, 2);
    qobject_unref(info);
    vblk_stop(d);
}

int main(int argc, char **argv)
{
    int i;

    g_test_init(&argc, &argv, NULL);

    qtest_add_func("/io-uring-fixed/hugetlb", test_hugetlb);
    qtest_add_func("/io-uring-fixed/small-pages", test_small_pages);
    qtest_add_data_func("/io-uring-fixed/thp/locked", GINT_TO_POINTER(1),
                        test_thp);
    qtest_add_data_func("/io-uring-fixed/thp/unlocked", GINT_TO_POINTER(0),
                        test_thp);
    qtest_add_func("/io-uring-fixed/thp/partial", test_thp_partial);
    qtest_add_func("/io-uring-fixed/small-requests", test_small_requests);
    for (i = 0; i < ARRAY_SIZE(auto_cases); i++) {
        g_autofree char *path = g_strdup_printf("/io-uring-fixed/%s",
                                                auto_cases[i].name);

        qtest_add_data_func(path, &auto_cases[i].c, test_auto);
    }
    qtest_add_func("/io-uring-fixed/chunk-boundary", test_chunk_boundary);
    qtest_add_func("/io-uring-fixed/ramblock-boundary", test_ramblock_boundary);
    qtest_add_func("/io-uring-fixed/every-chunk-boundary",
                   test_every_chunk_boundary);
    qtest_add_data_func("/io-uring-fixed/iothreads/clone", GINT_TO_POINTER(1),
                        test_iothreads);
    qtest_add_data_func("/io-uring-fixed/iothreads/per-ring",
                        GINT_TO_POINTER(0), test_iothreads);
    qtest_add_data_func("/io-uring-fixed/start-pins-whole/clone",
                        GINT_TO_POINTER(1), test_start_pins_whole);
    qtest_add_data_func("/io-uring-fixed/start-pins-whole/per-ring",
                        GINT_TO_POINTER(0), test_start_pins_whole);
    qtest_add_data_func("/io-uring-fixed/hotplug/clone", GINT_TO_POINTER(1),
                        test_hotplug);
    qtest_add_data_func("/io-uring-fixed/hotplug/per-ring", GINT_TO_POINTER(0),
                        test_hotplug);
    qtest_add_func("/io-uring-fixed/memlock", test_memlock);
    qtest_add_func("/io-uring-fixed/monitor-while-pinning",
                   test_monitor_while_pinning);
    qtest_add_data_func("/io-uring-fixed/hotplug-under-load/clone",
                        GINT_TO_POINTER(1), test_hotplug_load);
    qtest_add_data_func("/io-uring-fixed/hotplug-under-load/per-ring",
                        GINT_TO_POINTER(0), test_hotplug_load);
    qtest_add_data_func("/io-uring-fixed/memlock-hotplug/clone",
                        GINT_TO_POINTER(1), test_memlock_hotplug);
    qtest_add_data_func("/io-uring-fixed/memlock-hotplug/per-ring",
                        GINT_TO_POINTER(0), test_memlock_hotplug);
    return g_test_run();
}
