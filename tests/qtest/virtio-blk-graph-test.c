/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * virtio-blk under load while the user changes the block graph
 *
 * Every management operation that drains a device or puts a new node
 * under it (resize, stop/cont, reopen, snapshot, stream, commit, mirror,
 * backup, moving a node to another iothread, unplugging the disk and
 * plugging it in again) runs while the device has a full load in flight:
 * four queues of 256 requests, 4 KiB writes and reads at random places,
 * on an iothread.  Each operation must return
 * within OP_BOUND_S seconds (an operation that hangs in a drain aborts
 * the test with its name), no request may be lost or fail, every read
 * returns what was written, and at the end every byte the guest wrote is
 * read back through the device (and, where the active node is a raw
 * image, found in that image file).  With aio-fixed-buffers=on, the node
 * in use after the change must serve the guest with fixed reads and
 * writes and never fall back as 'unregistered'.
 */

#include "qemu/osdep.h"
#include "qemu/units.h"
#include "qobject/qdict.h"
#include "qobject/qlist.h"
#include "qobject/qstring.h"
#include "standard-headers/linux/virtio_blk.h"
#include "virtio-blk-helpers.h"

#define DISK_SIZE (64 * MiB)
#define BLOCK (4 * KiB)
#define NQ 4
#define QUEUE_SIZE 256
#define DEPTH (NQ * QUEUE_SIZE)         /* requests in one load round */
#define OP_BOUND_S 30                   /* for one QMP command */
#define JOB_ROUNDS 2000                 /* load rounds a job may take */

typedef struct Backend {
    const char *name;
    const char *opts;                   /* of a file node, as -blockdev */
    const char *json;                   /* the same, as QMP arguments */
    bool fixed;
} Backend;

static const Backend backends[] = {
    { "threads", "aio=threads,cache.direct=on",
      "'aio': 'threads', 'cache': {'direct': true}" },
    { "native", "aio=native,cache.direct=on",
      "'aio': 'native', 'cache': {'direct': true}" },
    { "io_uring", "aio=io_uring,cache.direct=on",
      "'aio': 'io_uring', 'cache': {'direct': true}" },
    { "io_uring-fixed", "aio=io_uring,cache.direct=on,aio-fixed-buffers=on",
      "'aio': 'io_uring', 'cache': {'direct': true}, "
      "'aio-fixed-buffers': 'on'", true },
};

/* The guest: a device with a load to keep in flight */
typedef struct Guest {
    const Backend *b;
    VblkDev *d;
    GRand *rand;
    unsigned round;
    VblkSeg segs[DEPTH];
    VblkIo ios[DEPTH];
    uint8_t *before;                    /* the shadow before this round */
    char *trace_log;                    /* with fixed buffers: unpins */
} Guest;

/* --- bounded QMP ------------------------------------------------------ */

static const char *op_name;

static void op_timed_out(int sig)
{
    static const char msg[] = "QMP command did not return in time: ";

    if (write(2, msg, sizeof(msg) - 1) < 0 ||
        write(2, op_name, strlen(op_name)) < 0 || write(2, "\n", 1) < 0) {
        /* nothing more to say */
    }
    abort();
}

/*
 * Run a QMP command (printf-style text, strings in single quotes) and
 * return its response; abort the test if QEMU does not answer within
 * OP_BOUND_S seconds (a drain that never ends).
 */
static QDict *G_GNUC_PRINTF(3, 0) qmp_vbounded(Guest *g, const char *name,
                                              const char *fmt, va_list ap)
{
    g_autofree char *cmd = g_strdup_vprintf(fmt, ap);
    struct sigaction sa = { .sa_handler = op_timed_out };
    QDict *rsp;

    op_name = name;
    sigaction(SIGALRM, &sa, NULL);
    alarm(g_getenv("VBLK_OP_BOUND_S") ? atoi(g_getenv("VBLK_OP_BOUND_S")) :
          OP_BOUND_S);
    qtest_qmp_send_raw(g->d->qts, "%s", cmd);
    rsp = qtest_qmp_receive(g->d->qts);
    alarm(0);
    g_assert(rsp);
    return rsp;
}

static QDict *G_GNUC_PRINTF(3, 4) qmp_bounded(Guest *g, const char *name,
                                              const char *fmt, ...)
{
    QDict *rsp;
    va_list ap;

    va_start(ap, fmt);
    rsp = qmp_vbounded(g, name, fmt, ap);
    va_end(ap);
    return rsp;
}

static void assert_ok(QDict *rsp, const char *name)
{
    if (!qdict_haskey(rsp, "return")) {
        g_error("%s failed: %s", name,
                qdict_get_str(qdict_get_qdict(rsp, "error"), "desc"));
    }
    qobject_unref(rsp);
}

/* --- load ------------------------------------------------------------- */

/*
 * One round: DEPTH requests spread over the queues, every other one a
 * write.  All go to distinct blocks of one parity (alternating by round),
 * so that no read races a write of the same round; reads check against
 * what earlier rounds wrote.
 */
static void load_prepare(Guest *g)
{
    VblkDev *d = g->d;
    uint64_t nblocks = d->capacity / BLOCK / 2;
    g_autofree bool *taken = g_new0(bool, nblocks);
    unsigned parity = g->round & 1;
    int i;

    memcpy(g->before, d->shadow, d->capacity);
    for (i = 0; i < DEPTH; i++) {
        uint64_t blk;

        do {
            blk = g_rand_int_range(g->rand, 0, nblocks);
        } while (taken[blk]);
        taken[blk] = true;
        g->segs[i] = (VblkSeg) { d->data_start + i * BLOCK, BLOCK };
        g->ios[i] = (VblkIo) {
            .q = i % NQ,
            .type = i & 1 ? VIRTIO_BLK_T_IN : VIRTIO_BLK_T_OUT,
            .offset = (blk * 2 + parity) * BLOCK,
            .segs = &g->segs[i], .nsegs = 1,
        };
        if (i & 1) {
            vblk_poison(d, &g->ios[i]);
        } else {
            vblk_fill(d, &g->ios[i], 1000 + g->round * DEPTH + i);
        }
    }
    g->round++;
}

/* Every request of the round succeeded; every read got the right data */
static void load_check(Guest *g)
{
    int i;

    for (i = 0; i < DEPTH; i++) {
        g_assert_cmpint(g->ios[i].status, ==, VIRTIO_BLK_S_OK);
        if (g->ios[i].type == VIRTIO_BLK_T_IN) {
            vblk_check(g->d, &g->ios[i]);
        }
    }
}

static VblkBatch *load_start(Guest *g)
{
    load_prepare(g);
    return vblk_batch_start(g->d, g->ios, DEPTH);
}

static void load_finish(Guest *g, VblkBatch *b)
{
    vblk_batch_wait(b);
    load_check(g);
}

static void load_round(Guest *g)
{
    load_finish(g, load_start(g));
}

/* A round with @name (a QMP command, bounded) run while it is in flight */
static QDict *G_GNUC_PRINTF(3, 4) under_load(Guest *g, const char *name,
                                             const char *fmt, ...)
{
    VblkBatch *b = load_start(g);
    QDict *rsp;
    va_list ap;

    va_start(ap, fmt);
    rsp = qmp_vbounded(g, name, fmt, ap);
    va_end(ap);
    load_finish(g, b);
    return rsp;
}

/* --- the guest and its checks ---------------------------------------- */

static char *image_path(const char *what)
{
    return g_strdup_printf("%s/vblk-graph-%s-%d.img", g_get_tmp_dir(), what,
                           getpid());
}

static Guest *guest_start(const Backend *b)
{
    Guest *g = g_new0(Guest, 1);
    char *image = vblk_make_image(DISK_SIZE);

    g->b = b;
    g->rand = g_rand_new_with_seed(20261201);
    g->trace_log = image_path("trace");
    g->d = vblk_start(512 * MiB, image, NQ,
                      "-machine pc -m 512M -object iothread,id=io0 "
                      "-object iothread,id=io1 "
                      "-trace uring_fixed_unregister -D %s "
                      "-blockdev file,node-name=disk0,filename=%s,%s "
                      "-device virtio-blk-pci,id=vblk0,addr=04.0,"
                      "drive=disk0,num-queues=%u,queue-size=%u,iothread=io0",
                      g->trace_log, image, b->opts, NQ, QUEUE_SIZE);
    g->before = g_malloc(g->d->capacity);
    return g;
}

/* Fixed reads and writes, and 'unregistered' fallbacks, of every ring */
static void fixed_counts(Guest *g, int64_t *fixed, int64_t *unregistered)
{
    QDict *info = vblk_fixed_info(g->d);
    QListEntry *e;

    *fixed = *unregistered = 0;
    QLIST_FOREACH_ENTRY(qdict_get_qlist(info, "rings"), e) {
        QDict *ring = qobject_to(QDict, qlist_entry_obj(e));

        *fixed += qdict_get_int(ring, "fixed-reads") +
                  qdict_get_int(ring, "fixed-writes");
        *unregistered += vblk_ring_fallbacks(ring, "unregistered");
    }
    qobject_unref(info);
}

/*
 * A few more rounds on the graph as it is now; with fixed buffers, the
 * node in use must serve them fixed, with no 'unregistered' fallback
 * (guest RAM that no ring knows) where the device sits on a file node:
 * over qcow2, a write that allocates a cluster also writes the rest of
 * it from a bounce buffer of qcow2's, which rightly goes the normal way.
 */
static void check_fixed_after(Guest *g, bool on_qcow2)
{
    int64_t fixed0, unreg0, fixed1, unreg1;
    int i;

    if (!g->b->fixed) {
        load_round(g);
        return;
    }
    fixed_counts(g, &fixed0, &unreg0);
    for (i = 0; i < 2; i++) {
        load_round(g);
    }
    fixed_counts(g, &fixed1, &unreg1);
    g_test_message("after the change: %" PRId64 " fixed I/Os, %" PRId64
                   " unregistered fallbacks", fixed1 - fixed0,
                   unreg1 - unreg0);
    g_assert_cmpint(fixed1 - fixed0, >=, DEPTH);
    if (!on_qcow2) {
        g_assert_cmpint(unreg1 - unreg0, ==, 0);
    }
}

/*
 * How often guest RAM was taken back from io_uring's fixed buffers (every
 * ring unpins it and QEMU waits for them; registered again, it is pinned
 * again)
 */
static int unpins(Guest *g)
{
    g_autofree char *log = NULL;
    int n = 0;
    const char *p;

    if (!g_file_get_contents(g->trace_log, &log, NULL, NULL)) {
        return 0;
    }
    for (p = log; (p = strstr(p, "uring_fixed_unregister")); p++) {
        n++;
    }
    return n;
}

/* Read the whole disk back through the device and check every byte */
static void read_back_all(Guest *g)
{
    enum { CHUNK = 256 * KiB, N = DEPTH / 4 };
    VblkDev *d = g->d;
    VblkSeg segs[N];
    VblkIo ios[N];
    uint64_t pos = 0;
    int i;

    while (pos < d->capacity) {
        int n = 0;

        for (i = 0; i < N && pos < d->capacity; i++, pos += CHUNK) {
            segs[i] = (VblkSeg) { d->data_start + i * CHUNK, CHUNK };
            ios[i] = (VblkIo) {
                .q = i % NQ, .type = VIRTIO_BLK_T_IN, .offset = pos,
                .segs = &segs[i], .nsegs = 1,
            };
            vblk_poison(d, &ios[i]);
            n++;
        }
        vblk_run(d, ios, n);
        for (i = 0; i < n; i++) {
            g_assert_cmpint(ios[i].status, ==, VIRTIO_BLK_S_OK);
            vblk_check(d, &ios[i]);
        }
    }
}

/*
 * Done: read everything back, then quit; if @image is not NULL it is the
 * raw image the device ends on, which must hold every byte written.
 */
static void guest_stop(Guest *g, char *image)
{
    read_back_all(g);
    if (image) {
        if (strcmp(image, g->d->image)) {
            unlink(g->d->image);
        }
        g_free(g->d->image);
        g->d->image = image;
        vblk_stop(g->d);
    } else {
        vblk_quit(g->d);
        unlink(g->d->image);
        g_free(g->d->image);
        g_free(g->d->shadow);
        g_free(g->d);
    }
    g_rand_free(g->rand);
    g_free(g->before);
    unlink(g->trace_log);
    g_free(g->trace_log);
    g_free(g);
}

/* A new image file of the disk's size: raw zeroes, or empty qcow2 */
static char *new_image(const char *what, bool qcow2)
{
    char *path = image_path(what);

    if (qcow2) {
        const char *qemu_img = g_getenv("QTEST_QEMU_IMG");
        g_autofree char *cmd = NULL;
        int status;

        g_assert_nonnull(qemu_img);
        cmd = g_strdup_printf("%s create -q -f qcow2 %s %" PRIu64,
                              qemu_img, path, (uint64_t)DISK_SIZE);
        g_assert_true(g_spawn_command_line_sync(cmd, NULL, NULL, &status,
                                                NULL));
        g_assert_true(g_spawn_check_exit_status(status, NULL));
    } else {
        int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);

        g_assert_cmpint(fd, >=, 0);
        g_assert_cmpint(ftruncate(fd, DISK_SIZE), ==, 0);
        close(fd);
    }
    return path;
}

/* blockdev-add a file node @node over @path, with the backend's options */
static void add_file_node(Guest *g, const char *node, const char *path)
{
    assert_ok(qmp_bounded(g, "blockdev-add",
                          "{'execute': 'blockdev-add', 'arguments': {"
                          " 'driver': 'file', 'node-name': '%s',"
                          " 'filename': '%s', %s}}", node, path, g->b->json),
              "blockdev-add");
}

/* What a user does once a node is out of use */
static void del_node(Guest *g, const char *node)
{
    assert_ok(qmp_bounded(g, "blockdev-del",
                          "{'execute': 'blockdev-del', 'arguments': {"
                          " 'node-name': '%s'}}", node), "blockdev-del");
}

/* The status of job @id in query-jobs, or NULL once it is gone */
static char *job_status(Guest *g, const char *id)
{
    QDict *rsp = qmp_bounded(g, "query-jobs", "{'execute': 'query-jobs'}");
    QListEntry *e;
    char *status = NULL;

    QLIST_FOREACH_ENTRY(qdict_get_qlist(rsp, "return"), e) {
        QDict *job = qobject_to(QDict, qlist_entry_obj(e));

        if (g_str_equal(qdict_get_str(job, "id"), id)) {
            g_assert_false(qdict_haskey(job, "error"));
            status = g_strdup(qdict_get_str(job, "status"));
        }
    }
    qobject_unref(rsp);
    return status;
}

/* Keep the load going until job @id is @status (NULL: gone) */
static void job_wait(Guest *g, const char *id, const char *status)
{
    int i;

    for (i = 0; i < JOB_ROUNDS; i++) {
        g_autofree char *now = job_status(g, id);

        if (g_strcmp0(now, status) == 0) {
            return;
        }
        load_round(g);
    }
    g_error("job %s never became %s", id, status ?: "done");
}

/* Put a qcow2 overlay (node top0, file top-file) over disk0, under load */
static char *snapshot(Guest *g)
{
    char *overlay = new_image("overlay", true);

    add_file_node(g, "top-file", overlay);
    assert_ok(qmp_bounded(g, "blockdev-add",
                          "{'execute': 'blockdev-add', 'arguments': {"
                          " 'driver': 'qcow2', 'node-name': 'top0',"
                          " 'file': 'top-file', 'backing': null}}"),
              "blockdev-add");
    assert_ok(under_load(g, "blockdev-snapshot",
                         "{'execute': 'blockdev-snapshot', 'arguments': {"
                         " 'node': 'disk0', 'overlay': 'top0'}}"),
              "blockdev-snapshot");
    return overlay;
}

/* --- the operations --------------------------------------------------- */

/*
 * Grow the disk a little each round; the device follows.  A drain hangs
 * only when the IOThread submits a request after it began, which one
 * round in some tens hits: RESIZES rounds make the hang near certain.
 */
#define RESIZES 64

static void test_resize(const Backend *b)
{
    Guest *g = guest_start(b);
    VblkDev *d = g->d;
    int i;

    load_round(g);
    for (i = 1; i <= RESIZES; i++) {
        assert_ok(under_load(g, "block_resize",
                             "{'execute': 'block_resize', 'arguments': {"
                             " 'node-name': 'disk0', 'size': %" PRIu64 "}}",
                             (uint64_t)DISK_SIZE + i * MiB),
                  "block_resize");
    }
    check_fixed_after(g, false);
    /* The image grew: the shadow's tail is zeroes */
    d->shadow = g_realloc(d->shadow, DISK_SIZE + RESIZES * MiB);
    memset(d->shadow + d->capacity, 0,
           DISK_SIZE + RESIZES * MiB - d->capacity);
    d->capacity = DISK_SIZE + RESIZES * MiB;
    g->before = g_realloc(g->before, d->capacity);
    guest_stop(g, g_strdup(d->image));
}

static void test_stop_cont(const Backend *b)
{
    Guest *g = guest_start(b);
    int i;

    for (i = 0; i < 4; i++) {
        assert_ok(under_load(g, "stop", "{'execute': 'stop'}"), "stop");
        assert_ok(qmp_bounded(g, "cont", "{'execute': 'cont'}"), "cont");
    }
    check_fixed_after(g, false);
    guest_stop(g, g_strdup(g->d->image));
}

/* Reopen the node with the options it has */
static void test_reopen(const Backend *b)
{
    Guest *g = guest_start(b);
    int i;

    for (i = 0; i < 4; i++) {
        assert_ok(under_load(g, "blockdev-reopen",
                             "{'execute': 'blockdev-reopen', 'arguments': {"
                             " 'options': [{'driver': 'file',"
                             " 'node-name': 'disk0', 'filename': '%s', %s}]}}",
                             g->d->image, g->b->json),
                  "blockdev-reopen");
    }
    check_fixed_after(g, false);
    guest_stop(g, g_strdup(g->d->image));
}

/* An external snapshot: writes go to a qcow2 overlay from then on */
static void test_snapshot(const Backend *b)
{
    Guest *g = guest_start(b);
    g_autofree char *overlay = NULL;

    load_round(g);
    overlay = snapshot(g);
    check_fixed_after(g, true);
    guest_stop(g, NULL);
    unlink(overlay);
}

/* Snapshot, then stream the old image into the overlay */
static void test_stream(const Backend *b)
{
    Guest *g = guest_start(b);
    g_autofree char *overlay = NULL;

    load_round(g);
    overlay = snapshot(g);
    load_round(g);
    assert_ok(under_load(g, "block-stream",
                         "{'execute': 'block-stream', 'arguments': {"
                         " 'job-id': 'job0', 'device': 'top0'}}"),
              "block-stream");
    job_wait(g, "job0", NULL);
    check_fixed_after(g, true);
    guest_stop(g, NULL);
    unlink(overlay);
}

/* Snapshot, then commit the overlay back: the device ends on disk0 */
static void test_commit(const Backend *b)
{
    Guest *g = guest_start(b);
    g_autofree char *overlay = NULL;

    load_round(g);
    overlay = snapshot(g);
    load_round(g);
    assert_ok(under_load(g, "block-commit",
                         "{'execute': 'block-commit', 'arguments': {"
                         " 'job-id': 'job0', 'device': 'top0'}}"),
              "block-commit");
    job_wait(g, "job0", "ready");
    assert_ok(under_load(g, "job-complete",
                         "{'execute': 'job-complete', 'arguments': {"
                         " 'id': 'job0'}}"), "job-complete");
    job_wait(g, "job0", NULL);
    del_node(g, "top0");
    del_node(g, "top-file");
    check_fixed_after(g, false);
    guest_stop(g, g_strdup(g->d->image));
    unlink(overlay);
}

/* Mirror to a new image, then switch the device over to it */
static void test_mirror(const Backend *b)
{
    Guest *g = guest_start(b);
    char *target = new_image("mirror", false);

    load_round(g);
    add_file_node(g, "target0", target);
    assert_ok(under_load(g, "blockdev-mirror",
                         "{'execute': 'blockdev-mirror', 'arguments': {"
                         " 'job-id': 'job0', 'device': 'disk0',"
                         " 'target': 'target0', 'sync': 'full'}}"),
              "blockdev-mirror");
    job_wait(g, "job0", "ready");
    assert_ok(under_load(g, "job-complete",
                         "{'execute': 'job-complete', 'arguments': {"
                         " 'id': 'job0'}}"), "job-complete");
    job_wait(g, "job0", NULL);
    del_node(g, "disk0");
    /*
     * The target was registered before the source gave guest RAM back:
     * it stayed pinned through the switch, and nothing waited for the
     * rings with the graph locked
     */
    g_assert_cmpint(unpins(g), ==, 0);
    check_fixed_after(g, false);
    guest_stop(g, target);
}

/*
 * A full backup started under load: the copy must hold, for every block,
 * what the disk held when the job started, which is before or after the
 * round in flight at that moment.
 */
static void test_backup(const Backend *b)
{
    Guest *g = guest_start(b);
    g_autofree char *target = new_image("backup", false);
    g_autofree uint8_t *before = NULL;
    g_autofree uint8_t *after = NULL;
    g_autofree uint8_t *copy = NULL;
    uint64_t pos, capacity = g->d->capacity;
    gsize len;

    load_round(g);
    add_file_node(g, "target0", target);
    assert_ok(under_load(g, "blockdev-backup",
                         "{'execute': 'blockdev-backup', 'arguments': {"
                         " 'job-id': 'job0', 'device': 'disk0',"
                         " 'target': 'target0', 'sync': 'full'}}"),
              "blockdev-backup");
    before = g_memdup2(g->before, capacity);
    after = g_memdup2(g->d->shadow, capacity);
    job_wait(g, "job0", NULL);
    del_node(g, "target0");
    check_fixed_after(g, false);

    g_assert_true(g_file_get_contents(target, (char **)&copy, &len, NULL));
    g_assert_cmpuint(len, ==, capacity);
    for (pos = 0; pos < capacity; pos += BLOCK) {
        if (memcmp(copy + pos, after + pos, BLOCK) &&
            memcmp(copy + pos, before + pos, BLOCK)) {
            g_error("backup block at %" PRIu64 " is neither before nor "
                    "after the job's start", pos);
        }
    }
    guest_stop(g, g_strdup(g->d->image));
    unlink(target);
}

/*
 * Moving a node that a device with an iothread uses is refused; under
 * load the refusal must come back promptly and the device go on.
 */
static void test_set_iothread(const Backend *b)
{
    Guest *g = guest_start(b);
    QDict *rsp;

    load_round(g);
    rsp = under_load(g, "x-blockdev-set-iothread",
                     "{'execute': 'x-blockdev-set-iothread', 'arguments': {"
                     " 'node-name': 'disk0', 'iothread': 'io1',"
                     " 'force': true}}");
    g_assert_true(qdict_haskey(rsp, "error"));
    qobject_unref(rsp);
    check_fixed_after(g, false);
    guest_stop(g, g_strdup(g->d->image));
}

/*
 * The requests of a round the device was unplugged under: each one it
 * took must have completed (the unplug drains them), with the right data
 * for a read; one it never took did nothing, so the disk keeps what it
 * held before.  Returns how many completed.
 */
static int load_abandon(Guest *g, VblkBatch *b)
{
    VblkDev *d = g->d;
    int i, completed = vblk_batch_abandon(b);

    for (i = 0; i < DEPTH; i++) {
        const VblkIo *io = &g->ios[i];

        if (io->status == 0xff) {
            if (io->type == VIRTIO_BLK_T_OUT) {
                memcpy(d->shadow + io->offset, g->before + io->offset,
                       io->segs[0].len);
            }
            continue;
        }
        g_assert_cmpint(io->status, ==, VIRTIO_BLK_S_OK);
        if (io->type == VIRTIO_BLK_T_IN) {
            vblk_check(d, io);
        }
    }
    return completed;
}

/* The registry holds no guest RAM and the kernel pins none for it */
static void wait_unpinned(Guest *g)
{
    QDict *info = NULL;
    int i;

    for (i = 0; i < 500; i++) {
        info = vblk_fixed_info(g->d);
        if (qdict_get_int(info, "registered-bytes") == 0 &&
            qdict_get_int(info, "pinned-bytes") == 0) {
            qobject_unref(info);
            return;
        }
        qobject_unref(info);
        g_usleep(10 * 1000);
    }
    g_error("guest RAM still registered after the last device went");
}

/*
 * Unplug the disk and plug it in again on the same node, REPLUGS times:
 * device_del, then the guest starts a round and ejects the device right
 * after the kick, with the round in flight.  The eject must end within
 * OP_BOUND_S with every request the device took completed; with fixed
 * buffers guest RAM is unpinned once no device uses it, and pinned again
 * for the new device, which must serve fixed.
 */
#define REPLUGS 4

static void test_replug(const Backend *b)
{
    Guest *g = guest_start(b);
    struct sigaction sa = { .sa_handler = op_timed_out };
    int i, completed;

    load_round(g);
    sigaction(SIGALRM, &sa, NULL);
    for (i = 0; i < REPLUGS; i++) {
        VblkBatch *batch;

        vblk_unplug_request(g->d);
        batch = load_start(g);
        op_name = "the guest's eject";
        alarm(OP_BOUND_S);
        vblk_eject(g->d);
        alarm(0);
        completed = load_abandon(g, batch);
        g_test_message("unplug %d: %d of %d requests completed", i,
                       completed, DEPTH);
        if (b->fixed) {
            wait_unpinned(g);
        }
        vblk_plug(g->d, "'drive': 'disk0', 'num-queues': %u, "
                  "'queue-size': %u, 'iothread': 'io0'", NQ, QUEUE_SIZE);
        load_round(g);
    }
    check_fixed_after(g, false);
    guest_stop(g, g_strdup(g->d->image));
}

static const struct {
    const char *name;
    void (*run)(const Backend *b);
} cases[] = {
    { "resize", test_resize },
    { "stop-cont", test_stop_cont },
    { "reopen", test_reopen },
    { "snapshot", test_snapshot },
    { "stream", test_stream },
    { "commit", test_commit },
    { "mirror", test_mirror },
    { "backup", test_backup },
    { "set-iothread", test_set_iothread },
    { "replug", test_replug },
};

typedef struct Case {
    const Backend *backend;
    void (*run)(const Backend *b);
} Case;

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
            g_autofree char *path = g_strdup_printf("/virtio-blk-graph/%s/%s",
                                                    backends[i].name,
                                                    cases[j].name);

            *c = (Case) { &backends[i], cases[j].run };
            qtest_add_data_func(path, c, run_case);
        }
    }
    return g_test_run();
}
