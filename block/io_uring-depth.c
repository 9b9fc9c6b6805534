/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * io_uring: no more requests in the kernel than the device takes
 *
 * io_uring first issues a read or write without blocking.  When a blk-mq
 * device has no free tag, that attempt fails with EAGAIN inside the
 * kernel and io_uring hands the request to an io-wq worker thread, which
 * sleeps until a tag is free.  Every request beyond the device's depth
 * then costs a worker wake-up and two context switches, and deep guest
 * queues over a shallow host device (a loop device has 128 tags) spend
 * more CPU in io-wq than in the I/O itself.
 *
 * A LuringDepth lets at most the device's nr_requests requests of one
 * BlockDriverState into the kernel per hardware queue (a few less: see
 * device_depth_headroom()).  The others wait in a CoQueue, in
 * the order they came, where waiting costs one coroutine switch; the
 * guest sees the device's back-pressure as it would from real hardware.
 *
 * Threading: one BlockDriverState may submit from several AioContexts
 * (iothread-vq-mapping), so @in_flight and @waiting are protected by
 * @lock.  A request that leaves hands its place to the first waiter,
 * which is woken in its own AioContext (qemu_co_enter_next() drops the
 * lock around aio_co_wake()); waiters are only ever woken that way, so
 * one wake-up is one admission.
 */

#include "qemu/osdep.h"
#include <sys/sysmacros.h>
#include "qemu/cutils.h"
#include "qemu/thread.h"
#include "block/io_uring-depth.h"
#include "trace.h"

struct LuringDepth {
    unsigned limit;
    QemuMutex lock;
    unsigned in_flight;         /* requests admitted and not yet left */
    CoQueue waiting;
};

static unsigned read_sysfs_uint(const char *dir, const char *name)
{
    g_autofree char *path = g_build_filename(dir, name, NULL);
    g_autofree char *text = NULL;
    unsigned value;

    if (!g_file_get_contents(path, &text, NULL, NULL) ||
        qemu_strtoui(g_strchomp(text), NULL, 10, &value) < 0) {
        return 0;
    }
    return value;
}

/*
 * The tags a request that completed may still hold when its completion
 * reaches us.  blk-mq ends a request's bios before it gives its tag back
 * (blk_mq_end_request(), and blk_mq_end_request_batch() for a whole batch
 * of requests), and the bio's end is what wakes our thread: it can reap
 * the completion and submit the next request while the completing CPU,
 * preempted or still in the batch, has not freed the tag yet.  A gate at
 * exactly nr_requests then sends that request to io-wq now and then under
 * CPU contention (seen about once in 15 runs of 8000 requests on a busy
 * 2-CPU host).  So a few tags are left for those stragglers.
 */
static unsigned device_depth_headroom(unsigned nr_requests)
{
    return MIN(MAX(nr_requests / 16, 1), nr_requests - 1);
}

/* The hardware queues of a blk-mq device: its mq/0, mq/1... */
static unsigned hardware_queues(const char *mq_dir)
{
    g_autoptr(GDir) dir = g_dir_open(mq_dir, 0, NULL);
    const char *name;
    unsigned n = 0;

    while (dir && (name = g_dir_read_name(dir))) {
        n += g_ascii_isdigit(name[0]);
    }
    return MAX(n, 1);
}

unsigned luring_device_depth(int fd)
{
    g_autofree char *dev_dir = NULL;
    g_autofree char *disk_dir = NULL;
    g_autofree char *mq_dir = NULL;
    unsigned nr_requests;
    struct stat st;
    dev_t dev;

    if (fstat(fd, &st) < 0) {
        return 0;
    }
    dev = S_ISBLK(st.st_mode) ? st.st_rdev : st.st_dev;
    if (major(dev) == 0) {
        return 0;   /* tmpfs and the like: no block device below */
    }
    dev_dir = g_strdup_printf("/sys/dev/block/%u:%u", major(dev), minor(dev));
    /* A partition queues on its disk */
    disk_dir = read_sysfs_uint(dev_dir, "partition") ?
               g_build_filename(dev_dir, "..", NULL) : g_strdup(dev_dir);
    /* Only blk-mq devices have tags to run out of */
    mq_dir = g_build_filename(disk_dir, "mq", NULL);
    if (!g_file_test(mq_dir, G_FILE_TEST_IS_DIR)) {
        return 0;
    }
    nr_requests = read_sysfs_uint(disk_dir, "queue/nr_requests");
    if (!nr_requests) {
        return 0;
    }
    /*
     * nr_requests is per hardware queue, and the submitting thread's CPU
     * picks one: with several, the node's requests may use all of them
     */
    return (nr_requests - device_depth_headroom(nr_requests)) *
           hardware_queues(mq_dir);
}

LuringDepth *luring_depth_new(unsigned limit)
{
    LuringDepth *depth;

    if (!limit) {
        return NULL;
    }
    depth = g_new0(LuringDepth, 1);
    depth->limit = limit;
    qemu_mutex_init(&depth->lock);
    qemu_co_queue_init(&depth->waiting);
    return depth;
}

void luring_depth_free(LuringDepth *depth)
{
    if (depth) {
        assert(depth->in_flight == 0);
        qemu_mutex_destroy(&depth->lock);
        g_free(depth);
    }
}

unsigned luring_depth_limit(const LuringDepth *depth)
{
    return depth ? depth->limit : 0;
}

void coroutine_fn luring_depth_enter(LuringDepth *depth)
{
    if (!depth) {
        return;
    }
    QEMU_LOCK_GUARD(&depth->lock);
    /* First come, first served: a newcomer never overtakes a waiter */
    if (depth->in_flight < depth->limit &&
        qemu_co_queue_empty(&depth->waiting)) {
        depth->in_flight++;
        return;
    }
    trace_luring_depth_wait(depth, depth->in_flight);
    /* luring_depth_leave() hands its place over to us */
    qemu_co_queue_wait(&depth->waiting, &depth->lock);
}

void coroutine_fn luring_depth_leave(LuringDepth *depth)
{
    if (!depth) {
        return;
    }
    QEMU_LOCK_GUARD(&depth->lock);
    assert(depth->in_flight > 0);
    /* The next waiter takes our place: in_flight stays as it is */
    if (!qemu_co_enter_next(&depth->waiting, &depth->lock)) {
        depth->in_flight--;
    }
}
