/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The buffer table of an AioContext's io_uring (util/fdmon-io_uring-buffers.c):
 * one owner, told when the ring goes away; changes only from the home
 * thread; a queued request keeps the buffer it was prepared for; a table
 * of its own cloned into a ring.
 */

#include "qemu/osdep.h"
#include <liburing.h>
#include "block/aio.h"
#include "qemu/io_uring-buffers-abi.h"
#include "qapi/error.h"
#include "qemu/cutils.h"
#include "qemu/main-loop.h"
#include "iothread.h"

typedef struct {
    AioBuffersOwner owner;
    AioContext *released_ctx;
    int releases;
    QemuEvent claimed;
} TestOwner;

static void test_owner_release(AioBuffersOwner *owner, AioContext *ctx)
{
    TestOwner *t = container_of(owner, TestOwner, owner);

    t->released_ctx = ctx;
    t->releases++;
}

static TestOwner main_owner = { .owner.release = test_owner_release };

/* A buffer for tables that no request uses */
static uint8_t idle_buf[4096];

static bool have_ring(void)
{
    if (!qemu_get_aio_context()->fdmon_ops->add_sqe) {
        g_test_skip("the event loop has no io_uring (kernel < 5.6?)");
        return false;
    }
    return true;
}

/* Only one owner at a time; claiming again is harmless */
static void test_claim(void)
{
    AioContext *ctx = qemu_get_aio_context();
    TestOwner other = { .owner.release = test_owner_release };

    if (!have_ring()) {
        return;
    }
    g_assert_cmpint(aio_buffers_claim(ctx, &main_owner.owner), ==, 0);
    g_assert_cmpint(aio_buffers_claim(ctx, &main_owner.owner), ==, 0);
    g_assert_cmpint(aio_buffers_claim(ctx, &other.owner), ==, -EBUSY);
    g_assert(aio_buffers_owner(ctx) == &main_owner.owner);
}

typedef struct {
    CqeHandler cqe_handler;
    int fd;
    void *buf;
    int index;
    bool done;
} FixedRead;

static void fixed_read_prep(struct io_uring_sqe *sqe, void *opaque)
{
    FixedRead *r = opaque;

    io_uring_prep_read_fixed(sqe, r->fd, r->buf, 4096, 0, r->index);
}

static void fixed_read_done(CqeHandler *cqe_handler)
{
    FixedRead *r = container_of(cqe_handler, FixedRead, cqe_handler);

    r->done = true;
}

/*
 * A READ_FIXED queued on buffer 0, then buffer 0 replaced before the
 * event loop ran: the read must still land in the buffer it was prepared
 * for.  Were it submitted after the change, the kernel would find its
 * address outside buffer 0 and fail it with -EFAULT.
 */
static void test_update_after_queued_read(void)
{
    AioContext *ctx = qemu_get_aio_context();
    g_autofree char *path = NULL;
    g_autofree uint8_t *old_buf = g_malloc0(4096);
    g_autofree uint8_t *new_buf = g_malloc0(4096);
    g_autofree uint8_t *pattern = g_malloc(4096);
    struct iovec old_iov = { old_buf, 4096 }, new_iov = { new_buf, 4096 };
    FixedRead r = { .cqe_handler.cb = fixed_read_done, .buf = old_buf };

    if (!have_ring()) {
        return;
    }
    memset(pattern, 0xa5, 4096);
    r.fd = g_file_open_tmp("vblk-aio-buffers-XXXXXX", &path, NULL);
    g_assert_cmpint(r.fd, >=, 0);
    g_assert_cmpint(pwrite(r.fd, pattern, 4096, 0), ==, 4096);

    g_assert_cmpint(aio_buffers_claim(ctx, &main_owner.owner), ==, 0);
    g_assert_cmpint(aio_buffers_register(ctx, &old_iov, 1), ==, 0);
    aio_add_sqe(fixed_read_prep, &r, &r.cqe_handler);
    g_assert_cmpint(aio_buffers_update(ctx, 0, &new_iov, 1), ==, 0);
    while (!r.done) {
        aio_poll(ctx, true);
    }

    g_assert_cmpint(r.cqe_handler.cqe.res, ==, 4096);
    g_assert(memcmp(old_buf, pattern, 4096) == 0);
    g_assert(buffer_is_zero(new_buf, 4096));
    aio_buffers_unregister(ctx);
    close(r.fd);
    unlink(path);
}

/* A READ_FIXED of @r, through @ctx's ring; its result */
static int fixed_read(AioContext *ctx, FixedRead *r)
{
    r->done = false;
    aio_add_sqe(fixed_read_prep, r, &r->cqe_handler);
    while (!r->done) {
        aio_poll(ctx, true);
    }
    return r->cqe_handler.cqe.res;
}

/*
 * A table of its own, slot 1 of 2 filled, cloned into the AioContext's
 * ring and then freed: the clone keeps the buffer, so a READ_FIXED from
 * slot 1 lands in it, and slot 0 stays empty.
 */
static void test_table_clone(void)
{
    AioContext *ctx = qemu_get_aio_context();
    g_autofree char *path = NULL;
    g_autofree uint8_t *buf = g_malloc0(4096);
    g_autofree uint8_t *pattern = g_malloc(4096);
    struct iovec iov = { buf, 4096 };
    FixedRead r = { .cqe_handler.cb = fixed_read_done, .buf = buf };
    AioBufferTable *table;

    if (!have_ring()) {
        return;
    }
    if (!aio_buffer_table_can_clone()) {
        g_test_skip("the kernel cannot clone buffer tables (Linux < 6.12)");
        return;
    }
    memset(pattern, 0x3c, 4096);
    r.fd = g_file_open_tmp("vblk-aio-buffers-XXXXXX", &path, NULL);
    g_assert_cmpint(r.fd, >=, 0);
    g_assert_cmpint(pwrite(r.fd, pattern, 4096, 0), ==, 4096);

    g_assert_cmpint(aio_buffer_table_new(&table, NULL, 2), ==, 0);
    g_assert_cmpint(aio_buffer_table_update(table, 1, &iov, 1), ==, 0);
    g_assert_cmpint(aio_buffers_claim(ctx, &main_owner.owner), ==, 0);
    g_assert_cmpint(aio_buffers_clone(ctx, table), ==, 0);
    aio_buffer_table_free(table);

    r.index = 0;
    g_assert_cmpint(fixed_read(ctx, &r), ==, -EFAULT);
    g_assert(buffer_is_zero(buf, 4096));
    r.index = 1;
    g_assert_cmpint(fixed_read(ctx, &r), ==, 4096);
    g_assert(memcmp(buf, pattern, 4096) == 0);
    aio_buffers_unregister(ctx);
    close(r.fd);
    unlink(path);
}

static void claim_bh(void *opaque)
{
    TestOwner *t = opaque;
    AioContext *ctx = qemu_get_current_aio_context();
    struct iovec iov = { idle_buf, sizeof(idle_buf) };

    g_assert_cmpint(aio_buffers_claim(ctx, &t->owner), ==, 0);
    g_assert_cmpint(aio_buffers_register(ctx, NULL, 4), ==, 0);
    g_assert_cmpint(aio_buffers_update(ctx, 2, &iov, 1), ==, 0);
    qemu_event_set(&t->claimed);
}

/* The owner hears when the AioContext, and its ring, go away; once */
static void test_release_with_ring(void)
{
    IOThread *iothread;
    AioContext *ctx;
    TestOwner t = { .owner.release = test_owner_release };

    if (!have_ring()) {
        return;
    }
    iothread = iothread_new();
    ctx = iothread_get_aio_context(iothread);
    /*
     * A QemuEvent, not aio_wait_bh_oneshot(), whose unsynchronized
     * done flag ThreadSanitizer reports
     */
    qemu_event_init(&t.claimed, false);
    aio_bh_schedule_oneshot(ctx, claim_bh, &t);
    qemu_event_wait(&t.claimed);
    qemu_event_destroy(&t.claimed);
    g_assert_cmpint(t.releases, ==, 0);
    iothread_join(iothread);
    g_assert_cmpint(t.releases, ==, 1);
    g_assert(t.released_ctx == ctx);
}

/* Another thread may not change an AioContext's table: it aborts */
static void test_foreign_thread(void)
{
    if (!have_ring()) {
        return;
    }
#ifdef QEMU_SANITIZE_THREAD
    /* The child dies with nothing on stderr under ThreadSanitizer */
    g_test_skip("the assertion's child process under ThreadSanitizer");
    return;
#endif
    if (g_test_subprocess()) {
        IOThread *iothread = iothread_new();

        aio_buffers_register(iothread_get_aio_context(iothread), NULL, 1);
        return;     /* not reached */
    }
    g_test_trap_subprocess(NULL, 0, 0);
    g_test_trap_assert_failed();
    g_test_trap_assert_stderr("*in_aio_context_home_thread*");
}

/*
 * The sparse table by the kernel ABI written by hand, which builds with
 * liburing before 2.2 use: a table of 4 empty slots, slot 2 filled, a
 * READ_FIXED from it lands there; slot 3, empty, fails the read.  And
 * the same with liburing's functions (with liburing before 2.2, these
 * are the ones by hand again).
 */
static void abi_sparse_read(bool by_hand)
{
    struct io_uring ring;
    g_autofree char *path = NULL;
    g_autofree uint8_t *buf = g_malloc0(4096);
    g_autofree uint8_t *pattern = g_malloc(4096);
    struct iovec iov = { buf, 4096 };
    struct io_uring_sqe *sqe;
    struct io_uring_cqe *cqe;
    int fd, ret, slot, seen;

    if (io_uring_queue_init(4, &ring, 0) < 0) {
        g_test_skip("no io_uring");
        return;
    }
    memset(pattern, 0x5a, 4096);
    fd = g_file_open_tmp("vblk-aio-buffers-XXXXXX", &path, NULL);
    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpint(pwrite(fd, pattern, 4096, 0), ==, 4096);

    ret = by_hand ? uring_abi_register_buffers_sparse(&ring, 4) :
                    io_uring_register_buffers_sparse(&ring, 4);
    g_assert_cmpint(ret, ==, 0);
    ret = by_hand ? uring_abi_register_buffers_update_tag(&ring, 2, &iov,
                                                          NULL, 1) :
                    io_uring_register_buffers_update_tag(&ring, 2, &iov,
                                                         NULL, 1);
    g_assert_cmpint(ret, ==, 1);

    for (slot = 2; slot < 4; slot++) {
        sqe = io_uring_get_sqe(&ring);
        io_uring_prep_read_fixed(sqe, fd, buf, 4096, 0, slot);
        sqe->user_data = slot;
    }
    g_assert_cmpint(io_uring_submit_and_wait(&ring, 2), ==, 2);
    for (seen = 0; seen < 2; seen++) {
        g_assert_cmpint(io_uring_peek_cqe(&ring, &cqe), ==, 0);
        /* Slot 2 holds the buffer, slot 3 nothing */
        g_assert_cmpint(cqe->res, ==, cqe->user_data == 2 ? 4096 : -EFAULT);
        io_uring_cqe_seen(&ring, cqe);
    }
    g_assert(memcmp(buf, pattern, 4096) == 0);
    io_uring_queue_exit(&ring);
    close(fd);
    unlink(path);
}

static void test_abi_by_hand(void)
{
    abi_sparse_read(true);
}

static void test_abi_liburing(void)
{
    abi_sparse_read(false);
}

int main(int argc, char **argv)
{
    qemu_init_main_loop(&error_fatal);
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/aio-buffers/claim", test_claim);
    g_test_add_func("/aio-buffers/update-after-queued-read",
                    test_update_after_queued_read);
    g_test_add_func("/aio-buffers/release-with-ring",
                    test_release_with_ring);
    g_test_add_func("/aio-buffers/foreign-thread", test_foreign_thread);
    g_test_add_func("/aio-buffers/table-clone", test_table_clone);
    g_test_add_func("/aio-buffers/abi/by-hand", test_abi_by_hand);
    g_test_add_func("/aio-buffers/abi/liburing", test_abi_liburing);
    return g_test_run();
}
