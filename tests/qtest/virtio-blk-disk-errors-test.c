/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * virtio-blk on a failing disk: blkdebug injects EIO into reads or writes,
 * once or for good, under each error policy of the device (rerror/werror
 * report, ignore, stop).  The guest sees IOERR exactly where the policy
 * says so; with stop, the VM pauses with the failed request parked, and
 * after 'cont' it is retried and completes with the right data.  Each
 * case runs over aio=threads and over io_uring with fixed buffers, where
 * the counters show that every request that reached the disk went fixed.
 */

#include "qemu/osdep.h"
#include "qemu/timer.h"
#include "qemu/units.h"
#include "qobject/qdict.h"
#include "qobject/qjson.h"
#include "qobject/qlist.h"
#include "qobject/qstring.h"
#include "standard-headers/linux/virtio_blk.h"
#include "virtio-blk-helpers.h"

#define DISK_SIZE (16 * MiB)
#define IO_SIZE (64 * KiB)
#define NREQ 4                      /* requests in flight at once */
#define WAIT_US (10 * 1000 * 1000)  /* for an event, or a retried request */

typedef struct Backend {
    const char *name;
    const char *opts;               /* of the file node */
    bool fixed;
} Backend;

static const Backend backends[] = {
    { "threads", "aio=threads", false },
    { "io_uring-fixed", "aio=io_uring,cache.direct=on,aio-fixed-buffers=on",
      true },
};

typedef struct Case {
    const char *name;
    bool write;                     /* writes fail, or reads */
    const char *policy;             /* report, ignore, stop */
    bool once;                      /* fail once, or until healed */
} Case;

static const Case cases[] = {
    { "write/report/once", true, "report", true },
    { "write/report/always", true, "report", false },
    { "read/report/once", false, "report", true },
    { "read/report/always", false, "report", false },
    { "write/ignore", true, "ignore", false },
    { "read/ignore", false, "ignore", false },
    { "write/stop/once", true, "stop", true },
    { "write/stop/always", true, "stop", false },
    { "read/stop/once", false, "stop", true },
    { "read/stop/always", false, "stop", false },
};

typedef struct Test {
    const Backend *backend;
    const Case *c;
} Test;

typedef struct Ctx {
    VblkDev *d;
    const Test *t;
    int reached;                    /* guest requests that reached the disk */
} Ctx;

/*
 * The stack is raw (disk0) -> blkdebug (dbg0) -> file (file0).  In
 * blkdebug state 1, the chosen kind of I/O fails with EIO (once, or every
 * time) where it covers sector FAIL_SECTOR, that is request FAIL_REQ of
 * NREQ.  The device reads sector 0 when it is created (geometry guess),
 * so the sector must be clear of the disk's start, or a 'once' rule would
 * be spent there.
 *
 * Healing moves blkdebug to state 2, whose only rule (errno 0) fails
 * nothing and replaces the failing rule in blkdebug's list of active
 * rules.  The trigger must be an event the guest never causes:
 *  - read_aio (a read through the raw node, from a backup job or HMP
 *    qemu-io) is also what every guest read causes, and the device's
 *    geometry read at start-up, so a read case would heal itself;
 *  - flush_to_os/flush_to_disk: stopping the VM flushes;
 *  - pwritev_zero, a write of zeroes, which this guest never sends.
 * HMP 'qemu-io disk0 "write ..."' cannot write: it attaches a new
 * BlockBackend to the node and asks for the write permission, which the
 * device does not share (share-rw=off).  'qemu-io -d' uses the device's
 * own BlockBackend, which holds it (the QOM path of the virtio-blk device
 * inside virtio-blk-pci, relative to /machine/peripheral).  qemu-io prints
 * to QEMU's stdout, not to the monitor (so the reply says nothing either
 * way; hence -q): the test checks instead that the write reached the file
 * (wr_highest_offset of file0).  The write of zeroes goes to the disk's
 * last sector, which holds zeroes already and no request touches.
 */
#define FAIL_REQ 1
#define FAIL_SECTOR (FAIL_REQ * MiB / VBLK_SECTOR)
#define HEAL_OFFSET (DISK_SIZE - VBLK_SECTOR)

static VblkDev *start(const Test *t)
{
    const Case *c = t->c;
    const char *event = c->write ? "write_aio" : "read_aio";
    const char *iotype = c->write ? "write" : "read";
    char *image = vblk_make_image(DISK_SIZE);

    return vblk_start(256 * MiB, image, 1,
        "-machine pc -m 256M -object iothread,id=io0 "
        "-blockdev file,node-name=file0,filename=%s,%s "
        "-blockdev '{\"driver\": \"blkdebug\", \"node-name\": \"dbg0\", "
        "\"image\": \"file0\", \"inject-error\": ["
        "{\"event\": \"%s\", \"iotype\": \"%s\", \"state\": 1, "
        "\"errno\": 5, \"sector\": %d, \"once\": %s, "
        "\"immediately\": false}, "
        "{\"event\": \"%s\", \"state\": 2, \"errno\": 0}], "
        "\"set-state\": [{\"event\": \"pwritev_zero\", \"state\": 1, "
        "\"new_state\": 2}]}' "
        "-blockdev raw,node-name=disk0,file=dbg0 "
        "-device virtio-blk-pci,id=vblk0,addr=04.0,drive=disk0,"
        "iothread=io0,werror=%s,rerror=%s",
        image, t->backend->opts, event, iotype, (int)FAIL_SECTOR,
        c->once ? "true" : "false",
        event, c->policy, c->policy);
}

static void segs_of(VblkDev *d, VblkSeg *seg, int i)
{
    *seg = (VblkSeg) { d->data_start + i * MiB, IO_SIZE };
}

/* NREQ writes of generation @gen, requests in @ios */
static void prepare_writes(Ctx *x, VblkIo *ios, VblkSeg *segs, unsigned gen)
{
    int i;

    for (i = 0; i < NREQ; i++) {
        segs_of(x->d, &segs[i], i);
        ios[i] = (VblkIo) {
            .type = VIRTIO_BLK_T_OUT, .offset = i * MiB,
            .segs = &segs[i], .nsegs = 1,
        };
        vblk_fill(x->d, &ios[i], gen);
    }
}

/* NREQ reads into poisoned buffers (not where the writes come from) */
static void prepare_reads(Ctx *x, VblkIo *ios, VblkSeg *segs)
{
    int i;

    for (i = 0; i < NREQ; i++) {
        segs_of(x->d, &segs[i], i);
        segs[i].gpa += 8 * MiB;
        ios[i] = (VblkIo) {
            .type = VIRTIO_BLK_T_IN, .offset = i * MiB,
            .segs = &segs[i], .nsegs = 1,
        };
        vblk_poison(x->d, &ios[i]);
    }
}

/* Some data on the disk for the reads to find */
static void write_all(Ctx *x, unsigned gen)
{
    VblkIo ios[NREQ];
    VblkSeg segs[NREQ];
    int i;

    prepare_writes(x, ios, segs, gen);
    vblk_run(x->d, ios, NREQ);
    for (i = 0; i < NREQ; i++) {
        g_assert_cmpint(ios[i].status, ==, VIRTIO_BLK_S_OK);
    }
    x->reached += NREQ;
}

/* Read everything back: the disk holds what the shadow says */
static void verify_all(Ctx *x)
{
    VblkIo ios[NREQ];
    VblkSeg segs[NREQ];
    int i;

    prepare_reads(x, ios, segs);
    vblk_run(x->d, ios, NREQ);
    for (i = 0; i < NREQ; i++) {
        g_assert_cmpint(ios[i].status, ==, VIRTIO_BLK_S_OK);
        vblk_check(x->d, &ios[i]);
    }
    x->reached += NREQ;
}

/*
 * The next event called @name, waiting at most WAIT_US (events before it
 * are dropped).  libqtest takes events off the socket only while it waits
 * for a reply, hence the query-status.
 */
static QDict *wait_event(Ctx *x, const char *name)
{
    gint64 deadline = g_get_monotonic_time() + WAIT_US;
    QDict *ev;

    while (!(ev = qtest_qmp_event_ref(x->d->qts, name))) {
        if (g_get_monotonic_time() > deadline) {
            g_error("no %s event within %d s", name, WAIT_US / 1000000);
        }
        g_usleep(10 * 1000);
        qobject_unref(qtest_qmp(x->d->qts, "{'execute': 'query-status'}"));
    }
    return ev;
}

/*
 * QEMU sends BLOCK_IO_ERROR with action report or ignore at most once a
 * second (monitor_qapi_event_conf; action stop is not limited), and
 * holds the next one back until the second is over.  Under qtest that is
 * a second of the virtual clock, which moves only when told to: let it
 * pass, so that an event held back is sent now and the next goes at once.
 */
static void pass_rate_limit(Ctx *x)
{
    qtest_clock_step(x->d->qts, NANOSECONDS_PER_SECOND);
}

/* A BLOCK_IO_ERROR event for the failing operation, with @action */
static void expect_io_error(Ctx *x, const char *action)
{
    QDict *ev = wait_event(x, "BLOCK_IO_ERROR");
    QDict *data = qdict_get_qdict(ev, "data");

    g_assert_cmpstr(qdict_get_str(data, "node-name"), ==, "disk0");
    g_assert_cmpstr(qdict_get_str(data, "operation"), ==,
                    x->t->c->write ? "write" : "read");
    g_assert_cmpstr(qdict_get_str(data, "action"), ==, action);
    qobject_unref(ev);
    if (strcmp(action, "stop")) {
        pass_rate_limit(x);
    }
}

/* No BLOCK_IO_ERROR event since the last one taken, nor one held back */
static void expect_no_io_error(Ctx *x)
{
    pass_rate_limit(x);
    qobject_unref(qtest_qmp(x->d->qts, "{'execute': 'query-status'}"));
    g_assert_null(qtest_qmp_event_ref(x->d->qts, "BLOCK_IO_ERROR"));
}

static const char *run_state(Ctx *x)
{
    static char state[32];
    QDict *rsp = qtest_qmp(x->d->qts, "{'execute': 'query-status'}");

    g_strlcpy(state, qdict_get_str(qdict_get_qdict(rsp, "return"), "status"),
              sizeof(state));
    qobject_unref(rsp);
    return state;
}

/* The event of an error with action stop, then the VM pauses */
static void expect_stop(Ctx *x)
{
    expect_io_error(x, "stop");
    qobject_unref(wait_event(x, "STOP"));
    g_assert_cmpstr(run_state(x), ==, "io-error");
}

/* wr_highest_offset of node @node_name */
static int64_t wr_highest_offset(Ctx *x, const char *node_name)
{
    QDict *rsp = qtest_qmp(x->d->qts, "{'execute': 'query-blockstats', "
                           "'arguments': {'query-nodes': true}}");
    QListEntry *e;
    int64_t offset = -1;

    QLIST_FOREACH_ENTRY(qdict_get_qlist(rsp, "return"), e) {
        QDict *s = qobject_to(QDict, qlist_entry_obj(e));

        if (!g_strcmp0(qdict_get_try_str(s, "node-name"), node_name)) {
            offset = qdict_get_int(qdict_get_qdict(s, "stats"),
                                   "wr_highest_offset");
        }
    }
    qobject_unref(rsp);
    g_assert_cmpint(offset, >=, 0);
    return offset;
}

/* Heal the disk: a write of zeroes moves blkdebug to state 2 (see above) */
static void heal(Ctx *x)
{
    g_autofree char *cmd = g_strdup_printf(
        "qemu-io -d vblk0/virtio-backend \"write -q -z %" PRIu64 " %d\"",
        (uint64_t)HEAL_OFFSET, VBLK_SECTOR);
    QDict *rsp;

    g_assert_cmpint(wr_highest_offset(x, "file0"), <, DISK_SIZE);
    rsp = qtest_qmp(x->d->qts, "{'execute': 'human-monitor-command', "
                    "'arguments': {'command-line': %s}}", cmd);
    g_assert_cmpstr(qdict_get_str(rsp, "return"), ==, "");
    qobject_unref(rsp);
    /* It went through blkdebug (past the set-state event) to the file */
    g_assert_cmpint(wr_highest_offset(x, "file0"), ==, DISK_SIZE);
}

/*
 * Request @i alone: a write of generation @gen (the shadow keeps the old
 * data in @saved, in case it fails) or a read into poisoned buffers.
 */
static void prepare_one(Ctx *x, VblkIo *io, VblkSeg *seg, int i,
                        unsigned gen, uint8_t *saved)
{
    segs_of(x->d, seg, i);
    *io = (VblkIo) {
        .type = x->t->c->write ? VIRTIO_BLK_T_OUT : VIRTIO_BLK_T_IN,
        .offset = i * MiB, .segs = seg, .nsegs = 1,
    };
    if (x->t->c->write) {
        memcpy(saved, x->d->shadow + io->offset, IO_SIZE);
        vblk_fill(x->d, io, gen);
    } else {
        seg->gpa += 8 * MiB;
        vblk_poison(x->d, io);
    }
}

/*
 * report: IOERR for the failed request and a BLOCK_IO_ERROR event, the
 * others go through; a 'once' error is gone in the second round, a
 * lasting one hits again.  The VM keeps running.
 */
static void run_report(Ctx *x)
{
    const Case *c = x->t->c;
    g_autofree uint8_t *saved = g_malloc(IO_SIZE);
    VblkIo io;
    VblkSeg seg;
    int i, round, ioerr;

    for (round = 0; round < 2; round++) {
        /* One request at a time, so that 'once' hits the very first */
        ioerr = 0;
        for (i = 0; i < NREQ; i++) {
            prepare_one(x, &io, &seg, i, 10 + round, saved);
            vblk_run(x->d, &io, 1);
            if (io.status == VIRTIO_BLK_S_IOERR) {
                g_assert_cmpint(i, ==, FAIL_REQ);
                g_assert_true(!c->once || round == 0);
                ioerr++;
                if (c->write) {
                    /* Nothing reached the disk: it keeps the old data */
                    memcpy(x->d->shadow + io.offset, saved, IO_SIZE);
                }
                expect_io_error(x, "report");
                continue;
            }
            g_assert_cmpint(io.status, ==, VIRTIO_BLK_S_OK);
            x->reached++;
            if (!c->write) {
                vblk_check(x->d, &io);
            }
        }
        g_assert_cmpint(ioerr, ==, c->once ? (round == 0) : 1);
        expect_no_io_error(x);
        g_assert_cmpstr(run_state(x), ==, "running");
    }
}

/*
 * ignore: the guest is told all is well (management gets the event); the
 * data did not move: a failed write left the disk as it was, a failed
 * read left the guest's buffer as it was.
 */
static void run_ignore(Ctx *x)
{
    const Case *c = x->t->c;
    g_autofree uint8_t *saved = g_malloc(IO_SIZE);
    g_autofree uint8_t *buf = g_malloc(IO_SIZE);
    VblkIo ios[NREQ];
    VblkSeg segs[NREQ];
    int i, j;

    if (c->write) {
        memcpy(saved, x->d->shadow + FAIL_REQ * MiB, IO_SIZE);
        prepare_writes(x, ios, segs, 20);
    } else {
        prepare_reads(x, ios, segs);
    }
    vblk_run(x->d, ios, NREQ);
    for (i = 0; i < NREQ; i++) {
        g_assert_cmpint(ios[i].status, ==, VIRTIO_BLK_S_OK);
    }
    expect_io_error(x, "ignore");
    expect_no_io_error(x);
    g_assert_cmpstr(run_state(x), ==, "running");
    x->reached += NREQ - 1;
    if (c->write) {
        /* Request FAIL_REQ wrote nothing: verify_all() finds old data */
        memcpy(x->d->shadow + ios[FAIL_REQ].offset, saved, IO_SIZE);
        return;
    }
    /* Request FAIL_REQ read nothing: its buffer still holds the poison */
    for (i = 0; i < NREQ; i++) {
        if (i != FAIL_REQ) {
            vblk_check(x->d, &ios[i]);
            continue;
        }
        qtest_memread(x->d->qts, segs[i].gpa, buf, IO_SIZE);
        for (j = 0; j < IO_SIZE; j++) {
            g_assert_cmpint(buf[j], ==, 0xa5);
        }
    }
}

/* Requests of @b done after @us of waiting: none completes meanwhile */
static int parked(VblkBatch *b, gulong us)
{
    int done = vblk_batch_poll(b);

    g_usleep(us);
    g_assert_cmpint(vblk_batch_poll(b), ==, done);
    return done;
}

/*
 * stop: the VM pauses (STOP, status io-error) with the failed request
 * parked, not completed, while the others complete.  A failure that lasts
 * stops the VM again on 'cont'; once the disk is well, 'cont' retries the
 * request and it completes with the right data, without another error.
 */
static void run_stop(Ctx *x)
{
    const Case *c = x->t->c;
    VblkIo ios[NREQ];
    VblkSeg segs[NREQ];
    VblkBatch *b;
    gint64 deadline;
    int i;

    if (c->write) {
        prepare_writes(x, ios, segs, 30);
    } else {
        prepare_reads(x, ios, segs);
    }
    b = vblk_batch_start(x->d, ios, NREQ);
    expect_stop(x);
    /* Stopping drained the disk: the others have completed */
    g_assert_cmpint(parked(b, 200 * 1000), ==, NREQ - 1);

    if (!c->once) {
        /* Still failing: 'cont' retries, fails and stops again */
        qtest_qmp_assert_success(x->d->qts, "{'execute': 'cont'}");
        expect_stop(x);
        g_assert_cmpint(parked(b, 100 * 1000), ==, NREQ - 1);
        heal(x);
        g_assert_cmpstr(run_state(x), ==, "io-error");
        g_assert_cmpint(parked(b, 0), ==, NREQ - 1);
    }

    qtest_qmp_assert_success(x->d->qts, "{'execute': 'cont'}");
    deadline = g_get_monotonic_time() + WAIT_US;
    while (vblk_batch_poll(b) < NREQ) {
        if (g_str_equal(run_state(x), "io-error")) {
            g_error("stopped again after 'cont': the retry failed");
        }
        g_assert_cmpint(g_get_monotonic_time(), <, deadline);
        g_usleep(1000);
    }
    vblk_batch_wait(b);
    expect_no_io_error(x);
    g_assert_cmpstr(run_state(x), ==, "running");
    for (i = 0; i < NREQ; i++) {
        g_assert_cmpint(ios[i].status, ==, VIRTIO_BLK_S_OK);
        if (!c->write) {
            vblk_check(x->d, &ios[i]);
        }
    }
    x->reached += NREQ;
}

/*
 * The user unplugs the disk while the VM is stopped on its I/O error, as
 * management does with a disk it gave up on: the write parked for a retry
 * goes with the device (it never completes; QEMU used to leak it, and with
 * it its queue's pool), and 'cont' runs the VM.  A new device on the same
 * disk, once healed, serves every request, and the disk holds all the
 * data written before.
 */
static void test_unplug_parked(gconstpointer opaque)
{
    const Test *t = opaque;
    Ctx x = { .t = t };
    VblkIo ios[NREQ];
    VblkSeg segs[NREQ];
    g_autofree uint8_t *saved = NULL;
    VblkBatch *b;

    x.d = start(t);
    saved = g_memdup2(x.d->shadow, x.d->capacity);
    prepare_writes(&x, ios, segs, 50);
    b = vblk_batch_start(x.d, ios, NREQ);
    expect_stop(&x);
    g_assert_cmpint(parked(b, 100 * 1000), ==, NREQ - 1);

    vblk_unplug_request(x.d);
    vblk_eject(x.d);
    g_assert_cmpint(vblk_batch_abandon(b), ==, NREQ - 1);
    /* The parked write never reached the disk: it holds what it held */
    memcpy(x.d->shadow + FAIL_REQ * MiB, saved + FAIL_REQ * MiB, IO_SIZE);
    qtest_qmp_assert_success(x.d->qts, "{'execute': 'cont'}");
    g_assert_cmpstr(run_state(&x), ==, "running");

    vblk_plug(x.d, "'drive': 'disk0', 'iothread': 'io0'");
    heal(&x);
    write_all(&x, 60);
    verify_all(&x);
    vblk_stop(x.d);
}

static void test_disk_errors(gconstpointer opaque)
{
    const Test *t = opaque;
    Ctx x = { .t = t };
    QDict *info, *ring;
    GString *json;

    x.d = start(t);
    if (!t->c->write) {
        write_all(&x, 1);
    }
    if (g_str_equal(t->c->policy, "report")) {
        run_report(&x);
    } else if (g_str_equal(t->c->policy, "ignore")) {
        run_ignore(&x);
    } else {
        run_stop(&x);
    }

    if (!t->c->once && !g_str_equal(t->c->policy, "stop")) {
        /* Healed, the failing kind of request goes through (stop did) */
        heal(&x);
        if (t->c->write) {
            write_all(&x, 40);
        }
    }
    verify_all(&x);
    expect_no_io_error(&x);

    if (t->backend->fixed) {
        /* Every request that reached the disk went as a fixed operation */
        info = vblk_fixed_info(x.d);
        ring = vblk_fixed_ring(info, "io0");
        g_assert_nonnull(ring);
        json = qobject_to_json(QOBJECT(ring));
        g_test_message("ring io0: %s", json->str);
        g_string_free(json, true);
        g_assert_cmpint(qdict_get_int(ring, "fixed-reads") +
                        qdict_get_int(ring, "fixed-writes"), ==, x.reached);
        qobject_unref(info);
    }
    vblk_stop(x.d);
}

int main(int argc, char **argv)
{
    int b, c;

    g_test_init(&argc, &argv, NULL);
    for (b = 0; b < ARRAY_SIZE(backends); b++) {
        for (c = 0; c < ARRAY_SIZE(cases); c++) {
            Test *t = g_new(Test, 1);
            g_autofree char *path =
                g_strdup_printf("/virtio-blk-disk-errors/%s/%s",
                                backends[b].name, cases[c].name);

            *t = (Test) { &backends[b], &cases[c] };
            qtest_add_data_func(path, t, test_disk_errors);
        }
    }
    for (b = 0; b < ARRAY_SIZE(backends); b++) {
        /* write/stop/always */
        Test *t = g_new(Test, 1);
        g_autofree char *path = g_strdup_printf(
            "/virtio-blk-disk-errors/%s/unplug-parked", backends[b].name);

        *t = (Test) { &backends[b], &cases[7] };
        g_assert(cases[7].write && !cases[7].once &&
                 g_str_equal(cases[7].policy, "stop"));
        qtest_add_data_func(path, t, test_unplug_parked);
    }
    return g_test_run();
}
