/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * io_uring fixed buffers over guest RAM: the registry and every ring
 *
 * The registry is changed by the main loop thread.  When the kernel can
 * clone buffer tables (Linux >= 6.12), guest RAM is pinned once, into a
 * table of the registry's own (the "pin table", an AioBufferTable), and
 * every AioContext's ring clones it; else
 * every ring registers the chunks itself.  Each ring follows the registry
 * in its own thread: a generation number, checked before each lookup,
 * tells it to re-sync.  Removing RAM syncs every ring before it returns.
 *
 * Threads.  Four kinds of thread come here:
 *  - the main loop thread, with the BQL held, changes the registry
 *    (uring_fixed_register() and uring_fixed_unregister(), for the block
 *    RAM registrar of each device) and reads it for the monitor;
 *  - with cloning, the pin thread (pin_thread()) pins what was added, so
 *    that no thread waits for it with the BQL held: faulting in and
 *    pinning many GiB of small pages takes seconds;
 *  - each AioContext's own thread looks chunks up for its requests and
 *    keeps its ring's kernel buffer table in step with the registry; it
 *    is the only thread that submits to that ring, changes its table, or
 *    writes the fields of its UringFixedRing.  The ring belongs to the
 *    event loop (util/fdmon-io_uring.c): the registry owns its buffer
 *    table through aio_buffers_claim() and changes it only through the
 *    aio_buffers_*() functions, which check that they run in that thread
 *    and let queued requests go before an index changes meaning;
 *  - any thread may add to or read the counters (Stat64);
 *  - whichever thread destroys an AioContext releases its UringFixedRing
 *    (ring_release()), when no thread runs that AioContext any more.
 *
 * reg.lock protects the registry (ranges, slots, table, the pin table,
 * the list of rings) and each ring's fields as the
 * monitor reads them: a ring's thread reads its own fields without the
 * lock (it is their only writer) but writes them under it.  The lock is
 * never held while a ring pins memory of its own (that faults guest RAM
 * in: a tenth of a second per GiB of hugepages, more than a second per
 * GiB of small pages never touched before), nor while the pin thread
 * pins all of guest RAM at once (the machine's start): it does that in a
 * new table, with reg.pin_busy set, and puts it in the place of the pin
 * table when done.  Rings keep cloning the old pin table meanwhile, and
 * memory leaves the registry only once the pin thread is done.  What
 * comes later (a DIMM) is pinned slot by slot into the pin table under
 * the lock, in the pin thread too.
 *
 * Lookups take no lock and no reference: a ring looks in its own table,
 * an immutable snapshot (UringChunkTable) that it holds until its next
 * sync.  reg.generation is stored with release semantics after reg.table
 * is set, and each ring loads it with acquire semantics before each
 * lookup; when it differs from the ring's, the ring syncs first.
 *
 * Memory that enters the registry is picked up lazily, at each ring's
 * next request.  Memory that leaves it must be unpinned by every ring
 * before it is unmapped, so uring_fixed_unregister() has every ring's
 * thread sync (aio_wait_bh_oneshot()) before it returns.
 */

#include "qemu/osdep.h"
#include <liburing.h>
#include "qemu/io_uring-buffers-abi.h"
#include <sys/ioctl.h>
#include <sys/vfs.h>
#include <linux/magic.h>
#include <sys/resource.h>
#include "exec/cpu-common.h"
#include "qemu/bitmap.h"
#include "qemu/cutils.h"
#include "qemu/error-report.h"
#include "qemu/iov.h"
#include "qemu/lockable.h"
#include "qemu/main-loop.h"
#include "qemu/mmap-alloc.h"
#include "qemu/stats64.h"
#include "qemu/thread.h"
#include "block/aio-wait.h"
#include "block/io_uring-fixed.h"
#include "trace.h"

#ifdef HAVE_IO_URING_OP_READV_FIXED
#define URING_OP_READV_FIXED            IORING_OP_READV_FIXED
#define URING_OP_WRITEV_FIXED           IORING_OP_WRITEV_FIXED
#else
/* Linux 6.15's opcodes, for liburing before 2.10 */
#define URING_OP_READV_FIXED            60
#define URING_OP_WRITEV_FIXED           61
#endif

/* One range handed to uring_fixed_register(), and its chunks; reg.lock */
typedef struct UringRange {
    uintptr_t start;
    size_t len;
    unsigned refs;          /* registrations of the same range */
    bool pending;           /* waits for pin_pending_bh() to be pinned */
    bool laid_out;          /* its chunks follow its hugepages */
    unsigned nr_chunks;
    UringChunk *chunks;
} UringRange;

/*
 * An AioContext's view of the registry, and the owner of its ring's
 * buffer table (aio_buffers_claim()).  Written by the AioContext's thread
 * only, under reg.lock (see the top of the file); the counters by any
 * thread.  Freed by ring_release() when the AioContext goes away.
 */
struct UringFixedRing {
    AioBuffersOwner owner;
    AioContext *ctx;
    /*
     * What this ring's kernel table holds; NULL until the first sync.
     * With cloning, a ring that is not disabled and has a table holds a
     * clone of the pin table.
     */
    UringChunkTable *table;
    uint64_t generation;        /* of @table; atomic, for the monitor */
    char *disabled_reason;
    /*
     * Without cloning, the slots of the ring's own table that the kernel
     * refused; NULL until the ring has a table of its own
     */
    unsigned long *refused;
    Stat64 fixed_reads;
    Stat64 fixed_writes;
    Stat64 fallbacks[IO_URING_FALLBACK_REASON__MAX];
    QLIST_ENTRY(UringFixedRing) next;
};

/*
 * The registry.  What the kernel can do is probed once, under the lock,
 * at the first registration, and only read after that (can_vectored by
 * every ring, hence atomically).
 */
static struct {
    QemuMutex lock;
    bool probed;
    bool can_clone;
    bool can_vectored;
    AioBufferTable *pin_table;  /* with can_clone, once RAM came */
    bool pin_scheduled;         /* pin_pending_bh() will run */
    bool pin_started;           /* the pin thread exists */
    bool pin_wanted;            /* work for the pin thread */
    bool pin_busy;              /* it pins without the lock */
    QemuCond pin_cond;          /* pin_wanted set, or pin_busy cleared */
    GArray *ranges;             /* of UringRange */
    unsigned long *slots;       /* slots in use */
    UringChunkTable *table;
    uint64_t generation;        /* read locklessly by every ring */
    QLIST_HEAD(, UringFixedRing) rings;
} reg;

static void __attribute__((__constructor__)) uring_fixed_init(void)
{
    qemu_mutex_init(&reg.lock);
    qemu_cond_init(&reg.pin_cond);
    reg.ranges = g_array_new(false, true, sizeof(UringRange));
    reg.slots = bitmap_new(URING_SLOTS_MAX);
    QLIST_INIT(&reg.rings);
}

/* --- kernel capabilities ---------------------------------------------- */

static bool probe_vectored_fixed(void)
{
    struct io_uring_probe *probe = io_uring_get_probe();
    bool ok;

    if (!probe) {
        return false;
    }
    ok = io_uring_opcode_supported(probe, URING_OP_READV_FIXED) &&
         io_uring_opcode_supported(probe, URING_OP_WRITEV_FIXED);
    io_uring_free_probe(probe);
    return ok;
}

/*
 * Where rings can clone a table, guest RAM is pinned once, in a table of
 * the registry's own (reg.pin_table, registered when RAM comes:
 * pin_pending_locked()), for all rings to clone.
 */
static bool probe_clone(void)
{
    if (getenv("QEMU_IO_URING_FIXED_NO_CLONE")) {
        return false;   /* to exercise the per-ring path */
    }
    return aio_buffer_table_can_clone();
}

static void probe_locked(void)
{
    if (reg.probed) {
        return;
    }
    reg.probed = true;
    qatomic_set(&reg.can_vectored, probe_vectored_fixed());

    reg.can_clone = probe_clone();
    trace_uring_fixed_probe(reg.can_vectored, reg.can_clone);
}

bool uring_fixed_can_clone(void)
{
    return reg.can_clone;
}

bool uring_fixed_can_vectored(void)
{
    return qatomic_read(&reg.can_vectored);
}

/* --- registry --------------------------------------------------------- */

static void report_refusal(int err, const UringChunk *c)
{
    struct rlimit rl = { 0 };

    switch (-err) {
    case ENOMEM:
        getrlimit(RLIMIT_MEMLOCK, &rl);
        warn_report_once("io_uring fixed buffers: cannot pin guest RAM, "
                         "RLIMIT_MEMLOCK is %llu KiB; raise it (ulimit -l, "
                         "LimitMEMLOCK=) or grant CAP_IPC_LOCK. I/O goes on "
                         "without fixed buffers for that memory",
                         (unsigned long long)rl.rlim_cur / 1024);
        break;
    case EFAULT:
    case EOPNOTSUPP:
        warn_report_once("io_uring fixed buffers: the kernel will not pin "
                         "guest RAM at %p long-term (RAM shared from a "
                         "regular file?); use memory-backend-memfd or "
                         "hugetlbfs. I/O goes on without fixed buffers for "
                         "that memory", (void *)c->start);
        break;
    default:
        warn_report_once("io_uring fixed buffers: registering guest RAM "
                         "failed: %s. I/O goes on without fixed buffers for "
                         "that memory", strerror(-err));
    }
}

/*
 * Two kinds of table: the registry's own pin table, which only the holder
 * of reg.lock touches (the pin thread's new table is its own until it
 * takes the pin table's place), and each AioContext's, which only its
 * thread changes.  Both through the event loop's API (aio_buffers_*() and
 * aio_buffer_table_*()).  The helpers below take the AioContext, or NULL
 * for the pin table.
 */

/* Put @c (NULL: nothing) into @slot of the table */
static int update_slot(AioContext *ctx, const UringChunk *c, unsigned slot)
{
    struct iovec iov = {
        .iov_base = c ? (void *)c->start : NULL,
        .iov_len = c ? c->len : 0,
    };
    int ret;

    if (ctx) {
        ret = aio_buffers_update(ctx, slot, &iov, 1);
    } else {
        ret = aio_buffer_table_update(reg.pin_table, slot, &iov, 1);
    }
    trace_uring_fixed_update_slot(ctx, slot, iov.iov_base, iov.iov_len, ret);
    return ret < 0 ? ret : 0;
}

static void chunk_table_ref(UringChunkTable *t)
{
    qatomic_inc(&t->refcnt);
}

void uring_chunk_table_unref(UringChunkTable *t)
{
    if (t && qatomic_fetch_dec(&t->refcnt) == 1) {
        g_free(t);
    }
}

static int chunk_cmp(const void *a, const void *b)
{
    const UringChunk *x = a, *y = b;

    return x->start < y->start ? -1 : x->start > y->start;
}

/* Make a new snapshot of the registry and tell every ring about it */
static void publish_locked(void)
{
    UringChunkTable *t;
    unsigned i, nr = 0;

    for (i = 0; i < reg.ranges->len; i++) {
        nr += g_array_index(reg.ranges, UringRange, i).nr_chunks;
    }
    t = g_malloc0(sizeof(*t) + nr * sizeof(t->chunks[0]));
    t->refcnt = 1;
    for (i = 0; i < reg.ranges->len; i++) {
        UringRange *r = &g_array_index(reg.ranges, UringRange, i);

        memcpy(&t->chunks[t->nr], r->chunks, r->nr_chunks * sizeof(*r->chunks));
        t->nr += r->nr_chunks;
    }
    qsort(t->chunks, t->nr, sizeof(t->chunks[0]), chunk_cmp);
    t->generation = reg.generation + 1;

    uring_chunk_table_unref(reg.table);
    reg.table = t;
    qatomic_store_release(&reg.generation, t->generation);
}

static UringRange *find_range_locked(uintptr_t start, size_t len, unsigned *idx)
{
    unsigned i;

    for (i = 0; i < reg.ranges->len; i++) {
        UringRange *r = &g_array_index(reg.ranges, UringRange, i);

        if (r->start == start && r->len == len) {
            *idx = i;
            return r;
        }
    }
    return NULL;
}

/* Give @c a slot of every ring's table, if one is left */
static void add_chunk_locked(UringChunk *c)
{
    long slot = find_first_zero_bit(reg.slots, URING_SLOTS_MAX);

    if (slot >= URING_SLOTS_MAX) {
        warn_report_once("io_uring fixed buffers: more than %d chunks of "
                         "guest RAM; the rest goes without fixed buffers",
                         URING_SLOTS_MAX);
        c->slot = URING_SLOTS_MAX;
        return;
    }
    set_bit(slot, reg.slots);
    c->slot = slot;
}

/*
 * Every chunk of @t, or of the registry when @t is NULL, at the index of
 * its slot; NULL where a slot is free (a sparse entry, which the kernel
 * accepts in a table registered whole)
 */
static void put_slot_iovecs(struct iovec *iov, const UringChunk *chunks,
                            unsigned nr)
{
    unsigned i;

    for (i = 0; i < nr; i++) {
        if (chunks[i].slot < URING_SLOTS_MAX) {
            iov[chunks[i].slot] = (struct iovec) {
                (void *)chunks[i].start, chunks[i].len
            };
        }
    }
}

static struct iovec *slot_iovecs(const UringChunkTable *t)
{
    struct iovec *iov = g_new0(struct iovec, URING_SLOTS_MAX);
    unsigned i;

    if (t) {
        put_slot_iovecs(iov, t->chunks, t->nr);
    }
    for (i = 0; !t && i < reg.ranges->len; i++) {
        UringRange *r = &g_array_index(reg.ranges, UringRange, i);

        put_slot_iovecs(iov, r->chunks, r->nr_chunks);
    }
    return iov;
}

/*
 * Register @ring's whole table in one call, from @iov (URING_SLOTS_MAX
 * entries).  Cheaper than slot by slot: for each hugepage it pins, the
 * kernel looks whether a buffer already in the table holds it, and a
 * table registered whole holds nothing yet.  Chunk by chunk, that look
 * goes through every slot and every hugepage registered before, and
 * costs more as guest RAM grows: 11 ms per GiB for 4 GiB of prefaulted
 * 2 MiB pages, 31 ms for 16 GiB, against 1.7-2.3 ms in one call.
 */
static int register_whole_table(AioContext *ctx, AioBufferTable **pin,
                                struct iovec *iov)
{
    int ret;

    if (ctx) {
        ret = aio_buffers_register(ctx, iov, URING_SLOTS_MAX);
    } else {
        ret = aio_buffer_table_new(pin, iov, URING_SLOTS_MAX);
    }
    trace_uring_fixed_register_table(ctx, URING_SLOTS_MAX, ret);
    return ret < 0 ? ret : 0;
}

/* Whether any chunk of the registry is pinned in the pin table */
static bool pin_table_holds_any_locked(void)
{
    unsigned i, j;

    for (i = 0; i < reg.ranges->len; i++) {
        UringRange *r = &g_array_index(reg.ranges, UringRange, i);

        for (j = 0; j < r->nr_chunks; j++) {
            if (r->chunks[j].pinned) {
                return true;
            }
        }
    }
    return false;
}

/*
 * The pin table holds nothing: register a new table with every chunk of
 * the registry, whole, and put it in the pin table's place.  The
 * registration faults in and pins all of guest RAM, so it runs without
 * the lock, with reg.pin_busy set: rings meanwhile clone the old pin
 * table (what they cloned stays valid until they clone again), no
 * memory leaves the registry (uring_fixed_unregister() waits), and what
 * is registered meanwhile waits for the next pass.  Returns how many of
 * reg.ranges, from the first, are pinned: 0 on failure, which leaves the
 * pin table as it was.
 */
static unsigned pin_table_whole_locked(void)
{
    g_autofree struct iovec *iov = slot_iovecs(NULL);
    unsigned n = reg.ranges->len, i, j;
    AioBufferTable *table;
    int ret;

    reg.pin_busy = true;
    qemu_mutex_unlock(&reg.lock);
    ret = register_whole_table(NULL, &table, iov);
    qemu_mutex_lock(&reg.lock);
    reg.pin_busy = false;
    qemu_cond_broadcast(&reg.pin_cond);
    if (ret < 0) {
        return 0;
    }

    aio_buffer_table_free(reg.pin_table);
    reg.pin_table = table;
    for (i = 0; i < n; i++) {
        UringRange *r = &g_array_index(reg.ranges, UringRange, i);

        for (j = 0; j < r->nr_chunks; j++) {
            r->chunks[j].pinned = r->chunks[j].slot < URING_SLOTS_MAX;
        }
        r->pending = false;
    }
    return n;
}

/* Pin the chunks of @r into the pin table, slot by slot */
static void pin_range_slots_locked(UringRange *r)
{
    unsigned i;
    int ret;

    if (!reg.pin_table) {
        ret = aio_buffer_table_new(&reg.pin_table, NULL, URING_SLOTS_MAX);
        if (ret < 0) {
            report_refusal(ret, &r->chunks[0]);
            return;
        }
    }
    for (i = 0; i < r->nr_chunks; i++) {
        UringChunk *c = &r->chunks[i];

        if (c->slot >= URING_SLOTS_MAX) {
            continue;
        }
        ret = update_slot(NULL, c, c->slot);
        if (ret < 0) {
            report_refusal(ret, c);
        }
        c->pinned = ret == 0;
    }
}

static bool pin_pending_any_locked(void)
{
    unsigned i;

    for (i = 0; i < reg.ranges->len; i++) {
        if (g_array_index(reg.ranges, UringRange, i).pending) {
            return true;
        }
    }
    return false;
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23          /* Linux 5.14 */
#endif
#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25                /* Linux 6.1 */
#endif

/* PAGEMAP_SCAN of Linux 6.7 (include/uapi/linux/fs.h) */
typedef struct UringPageRegion {
    uint64_t start, end, categories;
} UringPageRegion;

typedef struct UringPmScanArg {
    uint64_t size, flags, start, end, walk_end, vec, vec_len, max_pages;
    uint64_t category_inverted, category_mask, category_anyof_mask;
    uint64_t return_mask;
} UringPmScanArg;

#define URING_PAGEMAP_SCAN      _IOWR('f', 16, UringPmScanArg)
#define URING_PAGE_IS_HUGE      (1 << 6)

/*
 * Set in @huge the bit of each @unit-sized piece of [@base, @end), both
 * @unit-aligned, that one hugepage maps.  False where the kernel cannot
 * tell (before Linux 6.7).
 */
static bool scan_hugepages(int pagemap, uint64_t base, uint64_t end,
                           size_t unit, unsigned long *huge)
{
    UringPageRegion vec[64];
    uint64_t pos = base;

    while (pos < end) {
        UringPmScanArg arg = {
            .size = sizeof(arg),
            .start = pos,
            .end = end,
            .vec = (uintptr_t)vec,
            .vec_len = ARRAY_SIZE(vec),
            .category_mask = URING_PAGE_IS_HUGE,
            .return_mask = URING_PAGE_IS_HUGE,
        };
        long i, n = ioctl(pagemap, URING_PAGEMAP_SCAN, &arg);

        if (n < 0) {
            return false;
        }
        for (i = 0; i < n; i++) {
            uint64_t s = QEMU_ALIGN_UP(vec[i].start, unit);
            uint64_t e = QEMU_ALIGN_DOWN(vec[i].end, unit);

            if (s < e) {
                bitmap_set(huge, (s - base) / unit, (e - s) / unit);
            }
        }
        if (arg.walk_end <= pos) {
            break;
        }
        pos = arg.walk_end;
    }
    return true;
}

/* The size of a transparent hugepage, 0 if the administrator said never */
static size_t thp_size(void)
{
    g_autofree char *enabled = NULL, *size = NULL;
    uint64_t n;

    if (!g_file_get_contents("/sys/kernel/mm/transparent_hugepage/enabled",
                             &enabled, NULL, NULL) ||
        strstr(enabled, "[never]") ||
        !g_file_get_contents("/sys/kernel/mm/transparent_hugepage/"
                             "hpage_pmd_size", &size, NULL, NULL) ||
        qemu_strtou64(g_strstrip(size), NULL, 10, &n) < 0 ||
        !is_power_of_2(n)) {
        return 0;
    }
    return n;
}

/*
 * Make [@start, @start + @len) whole before it is pinned.  First its
 * pages are faulted in for writing, as pinning would: where the memory
 * allows, as hugepages, and the kernel collapses only memory that was
 * faulted in (an anonymous mapping never written has nothing to collapse
 * yet).  Then each @unit piece not on a hugepage yet is collapsed into
 * one (MADV_COLLAPSE, Linux 6.1), which pinned pages can no longer be.  A
 * piece fails to collapse where the host has no free hugepage (ENOMEM),
 * the memory is not aligned as a hugepage would be, or something else
 * holds its pages; it stays on small pages.  Returns which pieces are
 * hugepages now (see uring_chunk_split_runs()), or NULL where the kernel
 * cannot tell.  In the pin thread, without the lock: a second or more
 * per GiB of small pages.
 */
static unsigned long *make_whole(uintptr_t start, size_t len, size_t unit)
{
    uint64_t base = QEMU_ALIGN_DOWN((uint64_t)start, unit);
    uint64_t end = QEMU_ALIGN_UP((uint64_t)start + len, unit), p;
    size_t collapsed = 0, failed = 0;
    unsigned long *huge = bitmap_new((end - base) / unit);
    int pagemap = open("/proc/self/pagemap", O_RDONLY);

    /* Errors are pinning's to report */
    madvise((void *)start, len, MADV_POPULATE_WRITE);
    if (pagemap < 0 || !scan_hugepages(pagemap, base, end, unit, huge)) {
        if (pagemap >= 0) {
            close(pagemap);
        }
        g_free(huge);
        return NULL;
    }
    for (p = base; p < end; p += unit) {
        if (test_bit((p - base) / unit, huge) || p < start ||
            p + unit > (uint64_t)start + len) {
            continue;
        }
        if (madvise((void *)(uintptr_t)p, unit, MADV_COLLAPSE) == 0) {
            collapsed++;
        } else {
            failed++;
        }
    }
    if (collapsed) {
        bitmap_zero(huge, (end - base) / unit);
        if (!scan_hugepages(pagemap, base, end, unit, huge)) {
            bitmap_zero(huge, (end - base) / unit);
        }
    }
    close(pagemap);
    trace_uring_fixed_make_whole((void *)start, len, collapsed, failed);
    return huge;
}

/* Whether every piece of [@start, @start + @len) is a hugepage in @huge */
static bool all_huge(uintptr_t start, size_t len, const unsigned long *huge,
                     size_t unit)
{
    uint64_t base = QEMU_ALIGN_DOWN((uint64_t)start, unit);
    uint64_t first = ((uint64_t)start - base) / unit;
    uint64_t last = ((uint64_t)start + len - 1 - base) / unit;

    return find_next_zero_bit(huge, last + 1, first) > last;
}

/*
 * Cut @r's chunks again where its pages change between hugepages and
 * small ones (@huge), unless that takes more slots than are left: then
 * its chunks stay as they are, and learn whether they are all huge.
 */
static void lay_out_locked(UringRange *r, const unsigned long *huge,
                           size_t unit)
{
    size_t n = uring_chunk_split_runs(r->start, r->len, huge, unit, NULL, 0);
    size_t avail = URING_SLOTS_MAX - bitmap_count_one(reg.slots,
                                                      URING_SLOTS_MAX);
    unsigned i;

    for (i = 0; i < r->nr_chunks; i++) {
        avail += r->chunks[i].slot < URING_SLOTS_MAX;
    }
    if (n > avail || n == r->nr_chunks) {
        for (i = 0; i < r->nr_chunks; i++) {
            r->chunks[i].huge = all_huge(r->chunks[i].start,
                                         r->chunks[i].len, huge, unit);
        }
        if (n == r->nr_chunks) {
            /* the same cuts; otherwise, too many for the slots left */
            return;
        }
        warn_report_once("io_uring fixed buffers: guest RAM alternates "
                         "between hugepages and small pages too often to "
                         "give each run a buffer of its own");
        return;
    }
    for (i = 0; i < r->nr_chunks; i++) {
        if (r->chunks[i].slot < URING_SLOTS_MAX) {
            clear_bit(r->chunks[i].slot, reg.slots);
        }
    }
    g_free(r->chunks);
    r->chunks = g_new0(UringChunk, n);
    r->nr_chunks = uring_chunk_split_runs(r->start, r->len, huge, unit,
                                          r->chunks, n);
    for (i = 0; i < r->nr_chunks; i++) {
        add_chunk_locked(&r->chunks[i]);
    }
}

/*
 * Lay the chunks of every pending range out along its hugepages, after
 * collapsing its small pages (make_whole()), before anything of it is
 * pinned.  reg.pin_busy keeps the ranges in place meanwhile.
 */
static void make_pending_whole_locked(void)
{
    size_t unit = thp_size();
    unsigned i;

    for (i = 0; unit && i < reg.ranges->len; i++) {
        UringRange *r = &g_array_index(reg.ranges, UringRange, i);
        g_autofree unsigned long *huge = NULL;
        uintptr_t start = r->start;
        size_t len = r->len;

        if (!r->pending || r->laid_out) {
            continue;
        }
        reg.pin_busy = true;
        qemu_mutex_unlock(&reg.lock);
        huge = make_whole(start, len, unit);
        qemu_mutex_lock(&reg.lock);
        reg.pin_busy = false;
        qemu_cond_broadcast(&reg.pin_cond);

        r = &g_array_index(reg.ranges, UringRange, i); /* may have moved */
        r->laid_out = true;
        if (huge) {
            lay_out_locked(r, huge, unit);
        }
    }
}

/*
 * Pin every range added since the last call into the pin table, and tell
 * the rings.  When the pin table holds nothing (the machine's start, or
 * RAM registered again after postcopy), all of them go in one call that
 * registers the table whole; else, or when that call is refused
 * (RLIMIT_MEMLOCK?), slot by slot, so only the chunks refused stay out.
 * In the pin thread.
 */
static void pin_pending_locked(void)
{
    unsigned i = 0;

    if (!pin_pending_any_locked()) {
        return;     /* unregistered before their turn came */
    }
    make_pending_whole_locked();
    if (!pin_table_holds_any_locked()) {
        i = pin_table_whole_locked();
    }
    for (; i < reg.ranges->len; i++) {
        UringRange *r = &g_array_index(reg.ranges, UringRange, i);

        if (r->pending) {
            pin_range_slots_locked(r);
        }
        r->pending = false;
    }
    publish_locked();
}

/*
 * The pin thread, started at the first registration that needs it; it
 * lives as long as the process.  While it pins, requests on the memory
 * not pinned yet go without fixed buffers.
 */
static void *pin_thread(void *opaque)
{
    QEMU_LOCK_GUARD(&reg.lock);
    for (;;) {
        while (!reg.pin_wanted) {
            qemu_cond_wait(&reg.pin_cond, &reg.lock);
        }
        reg.pin_wanted = false;
        pin_pending_locked();
    }
    return NULL;
}

/*
 * Registrations come one RAM block at a time, a dozen of them as the
 * machine is built: guest RAM, then ROMs, video RAM and firmware blobs.
 * Pinned as they come, all but the first would go slot by slot, and each
 * such update costs the kernel a walk over the whole table for each
 * hugepage (see register_whole_table()).  So they wait for the main
 * loop's next round and go to the pin thread together.
 */
static void pin_pending_bh(void *opaque)
{
    QEMU_LOCK_GUARD(&reg.lock);
    reg.pin_scheduled = false;
    if (!reg.pin_started) {
        QemuThread thread;

        qemu_thread_create(&thread, "io-uring-pin", pin_thread, NULL,
                           QEMU_THREAD_DETACHED);
        reg.pin_started = true;
    }
    reg.pin_wanted = true;
    qemu_cond_broadcast(&reg.pin_cond);
}

bool uring_fixed_pinning(void)
{
    QEMU_LOCK_GUARD(&reg.lock);
    return reg.pin_scheduled || reg.pin_wanted || reg.pin_busy ||
           pin_pending_any_locked();
}

static void schedule_pin_locked(void)
{
    if (!reg.pin_scheduled) {
        reg.pin_scheduled = true;
        aio_bh_schedule_oneshot(qemu_get_aio_context(), pin_pending_bh, NULL);
    }
}

/*
 * Whether the RAM block at @host is backed by pages larger than the
 * host's: a hugetlbfs file or a memfd with hugetlb=on.  The kernel then
 * describes each hugepage of a fixed buffer with one bvec; on small pages
 * it needs one per page, where the pinning path merges physically
 * contiguous pages.  (qemu_ram_pagesize() has no stub for the tools.)
 */
bool uring_fixed_ram_on_hugepages(void *host)
{
    ram_addr_t offset;
    RAMBlock *rb = qemu_ram_block_from_host(host, false, &offset);
    int fd = rb ? qemu_ram_get_fd(rb) : -1;

    return fd >= 0 && qemu_fd_getpagesize(fd) > qemu_real_host_page_size();
}

/*
 * Whether the kernel will describe the RAM block at @host with one bvec
 * per hugepage once registered.  It must coalesce a buffer's hugepages
 * (Linux 6.10; before, each 4 KiB page of a buffer larger than one
 * hugepage is a bvec of its own) and the RAM must be all hugepages: on
 * hugetlbfs, or anonymous or shmem memory (memfd, tmpfs) while the host
 * makes transparent hugepages, which make_whole() collapses it into
 * before pinning it.  Only the pin thread collapses, where rings clone
 * its table (Linux 6.12): that is the kernel taken here.  (A file on
 * another file system has no hugepages; nor does a file mapped private,
 * whose pages written are anonymous copies of 4 KiB.)
 */
bool uring_fixed_ram_coalesces(void *host)
{
    ram_addr_t offset;
    RAMBlock *rb = qemu_ram_block_from_host(host, false, &offset);
    int fd = rb ? qemu_ram_get_fd(rb) : -1;
    struct statfs fs;

    WITH_QEMU_LOCK_GUARD(&reg.lock) {
        probe_locked();
    }
    if (!reg.can_clone) {
        return false;
    }
    if (uring_fixed_ram_on_hugepages(host)) {
        return true;
    }
    if (!rb || !thp_size()) {
        return false;
    }
    if (fd < 0) {
        return true;
    }
    return qemu_ram_is_shared(rb) && fstatfs(fd, &fs) == 0 &&
           fs.f_type == TMPFS_MAGIC;
}

void uring_fixed_register(void *host, size_t size)
{
    UringRange r = {
        .start = (uintptr_t)host,
        .len = size,
        .refs = 1,
    };
    UringRange *old;
    unsigned i;
    bool hugetlb;

    QEMU_LOCK_GUARD(&reg.lock);
    probe_locked();
    old = find_range_locked(r.start, r.len, &i);
    if (old) {
        old->refs++;
        return;
    }

    r.nr_chunks = uring_chunk_count(r.start, r.len);
    r.chunks = g_new0(UringChunk, r.nr_chunks);
    uring_chunk_split(r.start, r.len, r.chunks, r.nr_chunks);
    /* On hugetlbfs, all hugepages already; else the pin thread sees */
    hugetlb = uring_fixed_ram_on_hugepages(host);
    r.laid_out = hugetlb || !reg.can_clone;
    for (i = 0; i < r.nr_chunks; i++) {
        r.chunks[i].huge = hugetlb;
        add_chunk_locked(&r.chunks[i]);
        /* Without cloning, every ring pins it for itself */
        r.chunks[i].pinned = !reg.can_clone &&
                             r.chunks[i].slot < URING_SLOTS_MAX;
    }
    r.pending = reg.can_clone;
    g_array_append_val(reg.ranges, r);
    if (reg.can_clone) {
        schedule_pin_locked();
    }
    trace_uring_fixed_register(host, size, r.nr_chunks);
    publish_locked();
}

static bool unregister_locked(uintptr_t start, size_t len)
{
    UringRange *r;
    unsigned i, idx;

    r = find_range_locked(start, len, &idx);
    if (!r) {
        return false;   /* never registered, or registration was refused */
    }
    if (--r->refs > 0) {
        return false;
    }
    for (i = 0; i < r->nr_chunks; i++) {
        UringChunk *c = &r->chunks[i];

        if (c->slot >= URING_SLOTS_MAX) {
            continue;
        }
        if (c->pinned && reg.can_clone) {
            update_slot(NULL, NULL, c->slot);
        }
        clear_bit(c->slot, reg.slots);
    }
    g_free(r->chunks);
    g_array_remove_index(reg.ranges, idx);
    trace_uring_fixed_unregister((void *)start, len);
    publish_locked();
    return true;
}

static struct UringFixedRing *ring_of(AioContext *ctx);
static void ring_sync(struct UringFixedRing *ring);

static void ring_sync_bh(void *opaque)
{
    struct UringFixedRing *ring = ring_of(opaque);

    if (ring) {
        ring_sync(ring);
    }
}

void uring_fixed_unregister(void *host, size_t size)
{
    g_autoptr(GPtrArray) ctxs = g_ptr_array_new();
    struct UringFixedRing *ring;
    unsigned i;

    WITH_QEMU_LOCK_GUARD(&reg.lock) {
        /*
         * The pin thread may be pinning this memory: it must be done
         * before the memory goes.  Only when RAM goes in the first
         * seconds of the machine, or while a DIMM comes.
         */
        while (reg.pin_busy) {
            qemu_cond_wait(&reg.pin_cond, &reg.lock);
        }
        if (!unregister_locked((uintptr_t)host, size)) {
            return;
        }
        QLIST_FOREACH(ring, &reg.rings, next) {
            g_ptr_array_add(ctxs, ring->ctx);
        }
    }

    /*
     * The memory is about to be unmapped: make every ring drop it now, not
     * at its next request, so no ring keeps its pages pinned.
     */
    for (i = 0; i < ctxs->len; i++) {
        aio_wait_bh_oneshot(g_ptr_array_index(ctxs, i), ring_sync_bh,
                            g_ptr_array_index(ctxs, i));
    }
}

UringChunkTable *uring_fixed_table_get(void)
{
    QEMU_LOCK_GUARD(&reg.lock);
    if (reg.table) {
        chunk_table_ref(reg.table);
    }
    return reg.table;
}

/* --- rings ------------------------------------------------------------ */

/*
 * The AioContext's ring goes away, and its buffer table with it; called
 * by fdmon_io_uring_destroy() (see AioBuffersOwner) when no thread runs
 * @ctx.
 */
static void ring_release(AioBuffersOwner *owner, AioContext *ctx)
{
    struct UringFixedRing *ring = container_of(owner, struct UringFixedRing,
                                               owner);

    WITH_QEMU_LOCK_GUARD(&reg.lock) {
        QLIST_REMOVE(ring, next);
    }
    uring_chunk_table_unref(ring->table);
    g_free(ring->refused);
    g_free(ring->disabled_reason);
    g_free(ring);
}

/* @ctx's ring state, if it has any yet; in @ctx's thread */
static struct UringFixedRing *ring_of(AioContext *ctx)
{
    AioBuffersOwner *owner = aio_buffers_owner(ctx);

    if (likely(owner && owner->release == ring_release)) {
        return container_of(owner, struct UringFixedRing, owner);
    }
    return NULL;
}

/*
 * @ctx's ring state, made at its first request; NULL if its table is not
 * ours to use.  In @ctx's thread, which is the only one that claims its
 * table, so the claim cannot race.
 */
static struct UringFixedRing *ring_get(AioContext *ctx)
{
    struct UringFixedRing *ring = ring_of(ctx);

    if (likely(ring)) {
        return ring;
    }
    ring = g_new0(struct UringFixedRing, 1);
    ring->owner.release = ring_release;
    ring->ctx = ctx;
    if (aio_buffers_claim(ctx, &ring->owner) < 0) {
        warn_report_once("io_uring fixed buffers: the buffer table of an "
                         "AioContext's io_uring is in other use; I/O goes "
                         "on without fixed buffers there");
        g_free(ring);
        return NULL;
    }
    WITH_QEMU_LOCK_GUARD(&reg.lock) {
        QLIST_INSERT_HEAD(&reg.rings, ring, next);
    }
    return ring;
}

/*
 * Whether @ring's table is a clone of the pin table; under reg.lock, or
 * in @ring's thread
 */
static bool ring_cloned(struct UringFixedRing *ring)
{
    return reg.can_clone && ring->table && !ring->disabled_reason;
}

/* Can this ring read and write @c with fixed operations? */
static bool ring_can_use(struct UringFixedRing *ring, const UringChunk *c)
{
    return c->pinned && c->slot < URING_SLOTS_MAX &&
           !(ring->refused && test_bit(c->slot, ring->refused));
}

static void ring_disable(struct UringFixedRing *ring, const char *what, int err)
{
    if (!ring->disabled_reason) {
        ring->disabled_reason = g_strdup_printf("%s: %s", what, strerror(-err));
        warn_report_once("io_uring fixed buffers: %s; I/O goes on without "
                         "them", ring->disabled_reason);
    }
}

static const UringChunk *chunk_in_slot(const UringChunkTable *t, unsigned slot)
{
    unsigned i;

    for (i = 0; t && i < t->nr; i++) {
        if (t->chunks[i].slot == slot) {
            return &t->chunks[i];
        }
    }
    return NULL;
}

static bool same_chunk(const UringChunk *a, const UringChunk *b)
{
    return a && b && a->start == b->start && a->len == b->len;
}

/*
 * Without cloning: bring this ring's own kernel table from @old to @new,
 * and mark in @refused the slots the kernel would not take.
 *
 * Pinning a chunk can take long (faulting 1 GiB of guest RAM in takes
 * about 100 ms), so this runs without the registry lock, in the ring's
 * thread.  That is safe: @old and @new are immutable snapshots, and memory
 * that leaves the registry stays mapped until every ring has synced again
 * (uring_fixed_unregister() waits for them), so nothing @new names goes
 * away meanwhile.  The caller publishes @refused under the lock, where the
 * monitor reads it.  Returns 0, or a negative errno when the ring cannot
 * have a table of its own at all.
 */
static int ring_update_own(struct UringFixedRing *ring,
                           const UringChunkTable *old,
                           const UringChunkTable *new,
                           unsigned long *refused)
{
    AioContext *ctx = ring->ctx;
    unsigned i;
    int ret;

    if (!ring->refused) {
        /* The ring's first table */
        g_autofree struct iovec *iov = slot_iovecs(new);

        if (register_whole_table(ctx, NULL, iov) == 0) {
            bitmap_zero(refused, URING_SLOTS_MAX);
            return 0;
        }
        /* Some chunk refused: slot by slot, to find which */
        ret = aio_buffers_register(ctx, NULL, URING_SLOTS_MAX);
        if (ret < 0) {
            return ret;
        }
        old = NULL;
    }
    for (i = 0; old && i < old->nr; i++) {
        const UringChunk *c = &old->chunks[i];

        if (c->slot < URING_SLOTS_MAX &&
            !same_chunk(c, chunk_in_slot(new, c->slot))) {
            update_slot(ctx, NULL, c->slot);
        }
    }
    for (i = 0; new && i < new->nr; i++) {
        const UringChunk *c = &new->chunks[i];

        if (c->slot >= URING_SLOTS_MAX ||
            same_chunk(c, chunk_in_slot(old, c->slot))) {
            continue;
        }
        ret = update_slot(ctx, c, c->slot);
        if (ret < 0) {
            report_refusal(ret, c);
            set_bit(c->slot, refused);
        } else {
            clear_bit(c->slot, refused);
        }
    }
    return 0;
}

/*
 * With cloning: clone the pin table, under the registry lock, which
 * keeps it in step with the snapshot.  Cloning shares pages that are
 * pinned already, so it is quick.  When it fails, the ring goes without
 * fixed buffers, and drops the table it cloned before: that one may hold
 * memory that has just left the registry, which must not stay pinned.
 */
static int ring_clone_locked(struct UringFixedRing *ring)
{
    bool had_clone = ring_cloned(ring);
    int ret = aio_buffers_clone(ring->ctx, reg.pin_table);

    if (ret < 0) {
        ring_disable(ring, "cloning the pinned buffers failed", ret);
        if (had_clone) {
            aio_buffers_unregister(ring->ctx);
        }
    }
    return ret;
}

/*
 * Make this ring's buffer table match the registry; in the ring's thread,
 * the only one that changes the ring's kernel table and its fields (the
 * monitor reads them under the registry lock).
 */
static void ring_sync(struct UringFixedRing *ring)
{
    UringChunkTable *old = ring->table, *new;
    unsigned long *refused = NULL;
    bool own = false;
    int ret = 0;

    WITH_QEMU_LOCK_GUARD(&reg.lock) {
        new = reg.table;
        if (new) {
            chunk_table_ref(new);
        }
        if (!ring->disabled_reason) {
            if (!reg.can_clone) {
                own = true;
            } else if (reg.pin_table) {
                ret = ring_clone_locked(ring);
            }
            /* else nothing is pinned yet, and @new says so */
        }
    }

    if (own) {
        refused = bitmap_new(URING_SLOTS_MAX);
        if (ring->refused) {
            bitmap_copy(refused, ring->refused, URING_SLOTS_MAX);
        }
        ret = ring_update_own(ring, old, new, refused);
    }

    WITH_QEMU_LOCK_GUARD(&reg.lock) {
        if (own && ret < 0) {
            ring_disable(ring, "the kernel cannot register a sparse buffer "
                         "table (Linux >= 5.19 needed)", ret);
            g_free(refused);
        } else if (own) {
            g_free(ring->refused);
            ring->refused = refused;
        }
        ring->table = new;
        qatomic_set(&ring->generation, new ? new->generation : 0);
    }
    uring_chunk_table_unref(old);
    trace_uring_fixed_ring_sync(ring->ctx, ring->generation,
                                ring_cloned(ring), ret);
}

/* @ctx's ring, in step with the registry, or NULL if it is disabled */
static struct UringFixedRing *ring_ready(AioContext *ctx,
                                         IoUringFallbackReason *why)
{
    struct UringFixedRing *ring = ring_get(ctx);

    if (unlikely(!ring)) {
        *why = IO_URING_FALLBACK_REASON_RING_DISABLED;
        return NULL;
    }
    if (unlikely(qatomic_load_acquire(&reg.generation) != ring->generation)) {
        ring_sync(ring);
    }
    if (unlikely(ring->disabled_reason)) {
        *why = IO_URING_FALLBACK_REASON_RING_DISABLED;
        return NULL;
    }
    return ring;
}

int uring_fixed_lookup(AioContext *ctx, const struct iovec *iov, int niov,
                       IoUringFallbackReason *why)
{
    struct UringFixedRing *ring = ring_ready(ctx, why);
    const UringChunk *c;

    if (!ring) {
        return -1;
    }
    c = uring_chunk_for_iov(ring->table, iov, niov, why);
    if (!c) {
        return -1;
    }
    if (!ring_can_use(ring, c)) {
        *why = IO_URING_FALLBACK_REASON_NOT_PINNED;
        return -1;
    }
    if (niov > 1 && !qatomic_read(&reg.can_vectored)) {
        *why = IO_URING_FALLBACK_REASON_NO_VECTORED_FIXED;
        return -1;
    }
    return c->slot;
}

/*
 * The buffer index of the chunk holding the start of @iov (after @skip
 * bytes of iov[0]) and in @bytes how much of @iov from there lies in it
 * in one run; or -1 with the reason in @why.
 */
static int lookup_prefix(struct UringFixedRing *ring, const struct iovec *iov,
                         int niov, size_t skip, size_t *bytes,
                         IoUringFallbackReason *why)
{
    const UringChunk *c = uring_chunk_prefix(ring->table, iov, niov, skip,
                                             bytes);

    if (!c) {
        *why = IO_URING_FALLBACK_REASON_UNREGISTERED;
        return -1;
    }
    if (!ring_can_use(ring, c)) {
        *why = IO_URING_FALLBACK_REASON_NOT_PINNED;
        return -1;
    }
    /* More than the rest of iov[0]: a vectored operation */
    if (*bytes > iov[0].iov_len - skip && !qatomic_read(&reg.can_vectored)) {
        *why = IO_URING_FALLBACK_REASON_NO_VECTORED_FIXED;
        return -1;
    }
    return c->slot;
}

bool uring_fixed_cut(AioContext *ctx, const struct iovec *iov, int niov,
                     GArray *cuts, IoUringFallbackReason *why)
{
    struct UringFixedRing *ring = ring_ready(ctx, why);
    size_t total = iov_size(iov, niov);
    size_t pos = 0, skip = 0, bytes;
    int i = 0, slot;

    while (ring && pos < total) {
        slot = lookup_prefix(ring, iov + i, niov - i, skip, &bytes, why);
        if (slot < 0) {
            return false;
        }
        g_array_append_val(cuts, ((UringCut) { pos, bytes, slot }));
        pos += bytes;
        /* On to where the next part starts */
        for (skip += bytes; i < niov && skip >= iov[i].iov_len; i++) {
            skip -= iov[i].iov_len;
        }
    }
    return ring != NULL;
}

void uring_fixed_count_fixed(AioContext *ctx, bool write)
{
    struct UringFixedRing *ring = ring_get(ctx);

    if (ring) {
        stat64_add(write ? &ring->fixed_writes : &ring->fixed_reads, 1);
    }
}

void uring_fixed_count_fallback(AioContext *ctx, IoUringFallbackReason why)
{
    struct UringFixedRing *ring = ring_get(ctx);

    if (ring) {
        stat64_add(&ring->fallbacks[why], 1);
    }
}

static void ring_usable_chunks(struct UringFixedRing *ring,
                               unsigned *chunks, uint64_t *bytes)
{
    const UringChunkTable *t = ring->table;
    unsigned i;

    *chunks = 0;
    *bytes = 0;
    for (i = 0; t && !ring->disabled_reason && i < t->nr; i++) {
        const UringChunk *c = &t->chunks[i];

        if (ring_can_use(ring, c)) {
            (*chunks)++;
            *bytes += c->len;
        }
    }
}

static void ring_stats_free(gpointer p)
{
    UringRingStats *s = p;

    g_free(s->disabled_reason);
    g_free(s);
}

GPtrArray *uring_fixed_ring_stats(void)
{
    GPtrArray *all = g_ptr_array_new_with_free_func(ring_stats_free);
    struct UringFixedRing *ring;
    unsigned i;

    QEMU_LOCK_GUARD(&reg.lock);
    QLIST_FOREACH(ring, &reg.rings, next) {
        UringRingStats *s = g_new0(UringRingStats, 1);

        s->ctx = ring->ctx;
        s->synced = ring->generation == reg.generation;
        s->cloned = ring_cloned(ring);
        s->disabled_reason = g_strdup(ring->disabled_reason);
        ring_usable_chunks(ring, &s->chunks, &s->bytes);
        s->fixed_reads = stat64_get(&ring->fixed_reads);
        s->fixed_writes = stat64_get(&ring->fixed_writes);
        for (i = 0; i < IO_URING_FALLBACK_REASON__MAX; i++) {
            s->fallbacks[i] = stat64_get(&ring->fallbacks[i]);
        }
        g_ptr_array_add(all, s);
    }
    return all;
}

void uring_prep_rw_fixed(struct io_uring_sqe *sqe, int fd,
                         const struct iovec *iov, int niov, uint64_t offset,
                         int rw_flags, int buf_index, bool write)
{
    if (niov == 1) {
        io_uring_prep_rw(write ? IORING_OP_WRITE_FIXED : IORING_OP_READ_FIXED,
                         sqe, fd, iov->iov_base, iov->iov_len, offset);
    } else {
        io_uring_prep_rw(write ? URING_OP_WRITEV_FIXED : URING_OP_READV_FIXED,
                         sqe, fd, iov, niov, offset);
    }
    sqe->rw_flags = rw_flags;
    sqe->buf_index = buf_index;
}
