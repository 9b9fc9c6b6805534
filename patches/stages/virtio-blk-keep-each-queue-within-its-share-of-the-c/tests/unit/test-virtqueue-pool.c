/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * virtqueue request pools across threads
 *
 * A pool is taken from by one thread (the one that pops the virtqueue)
 * and given back to from any thread, without locks.  These tests run
 * that for real: one popping thread per pool takes objects as fast as the
 * pool lets it and hands them to releasing threads through a queue; the
 * releasing threads give them back.  What must hold:
 *  - a pool never has more out than its limit;
 *  - a popping thread that was told no is always woken (a missed wake-up
 *    would stall it: the test fails after a timeout instead of hanging);
 *  - a pool freed while objects are out leaves them be, and the releases
 *    that come later neither crash nor call the wake of the freed pool.
 * And one single-threaded case of the scratch list a chain is mapped into
 * (virtqueue-sg.c, linked in here for the pools' element layout).
 * Run under ThreadSanitizer (scripts/build tsan), the same tests check
 * that the lock-free paths have no data race.
 */

#include "qemu/osdep.h"
#include "qemu/atomic.h"
#include "qemu/lockable.h"
#include "qemu/thread.h"
#include "qemu/main-loop.h"
#include "hw/virtio/virtio.h"
#include "hw/virtio/virtqueue-pool.h"
#include "hw/virtio/virtqueue-sg.h"

#define STALL_MS 10000

/* Objects handed from a popping thread to the releasing threads */
typedef struct Handoff {
    QemuMutex lock;
    QemuCond cond;
    GQueue objects;
    bool done;
} Handoff;

typedef struct Popper {
    unsigned int idx;
    VirtQueuePool *pool;
    unsigned int limit;         /* of the pool */
    unsigned int takes;         /* how many to take in all */
    QemuSemaphore woken;
    unsigned int nr_wakes;      /* atomic */
    unsigned int out;           /* atomic: taken and not given back */
    Handoff *handoff;
    QemuThread thread;
} Popper;

static void wake(void *opaque)
{
    Popper *p = opaque;

    qatomic_inc(&p->nr_wakes);
    qemu_sem_post(&p->woken);
}

static void handoff_init(Handoff *h)
{
    qemu_mutex_init(&h->lock);
    qemu_cond_init(&h->cond);
    g_queue_init(&h->objects);
    h->done = false;
}

static void handoff_push(Handoff *h, VirtQueueElement *elem)
{
    QEMU_LOCK_GUARD(&h->lock);
    g_queue_push_tail(&h->objects, elem);
    qemu_cond_signal(&h->cond);
}

/* The next object to give back, or NULL once all are done */
static VirtQueueElement *handoff_pop(Handoff *h)
{
    QEMU_LOCK_GUARD(&h->lock);
    while (g_queue_is_empty(&h->objects) && !h->done) {
        qemu_cond_wait(&h->cond, &h->lock);
    }
    return g_queue_pop_head(&h->objects);
}

static void handoff_finish(Handoff *h)
{
    QEMU_LOCK_GUARD(&h->lock);
    h->done = true;
    qemu_cond_broadcast(&h->cond);
}

/* Which popper an object came from: kept in the element's index */
static Popper *poppers_all[8];

static void *releaser_thread(void *opaque)
{
    Handoff *h = opaque;
    VirtQueueElement *elem;

    while ((elem = handoff_pop(h))) {
        Popper *p = poppers_all[elem->index];

        g_assert_cmpuint(elem->out_num + elem->in_num, >=, 2);
        qatomic_dec(&p->out);
        virtqueue_pool_release(elem);
    }
    return NULL;
}

static void *popper_thread(void *opaque)
{
    Popper *p = opaque;
    unsigned int i;

    for (i = 0; i < p->takes; i++) {
        VirtQueueElement *elem;
        unsigned int out;

        while (!virtqueue_pool_may_take(p->pool)) {
            if (!qemu_sem_timedwait(&p->woken, STALL_MS)) {
                continue;
            }
            g_error("popper stalled: told no, never woken (%u out)",
                    qatomic_read(&p->out));
        }
        /* Drain wake-ups that came while we could take anyway */
        while (!qemu_sem_timedwait(&p->woken, 0)) {
            /* nothing */
        }
        /* Every tenth with more pieces than fit inline */
        elem = virtqueue_pool_alloc(p->pool, sizeof(VirtQueueElement),
                                    i % 10 ? 1 : 40, 1);
        elem->index = p->idx;
        out = qatomic_fetch_inc(&p->out) + 1;
        g_assert_cmpuint(out, <=, p->limit);
        handoff_push(p->handoff, elem);
    }
    return NULL;
}

static void popper_init(Popper *p, unsigned int idx, unsigned int limit,
                        unsigned int takes, Handoff *h)
{
    *p = (Popper) {
        .idx = idx,
        .pool = virtqueue_pool_new(sizeof(VirtQueueElement), 8),
        .limit = limit, .takes = takes, .handoff = h,
    };
    qemu_sem_init(&p->woken, 0);
    poppers_all[idx] = p;
    virtqueue_pool_limit_in_flight(p->pool, limit, wake, p);
}

/* @nr_poppers pools with a limit of @limit each, @nr_releasers threads */
static void run(unsigned int nr_poppers, unsigned int limit,
                unsigned int nr_releasers, unsigned int takes)
{
    g_autofree Popper *poppers = g_new0(Popper, nr_poppers);
    g_autofree QemuThread *releasers = g_new(QemuThread, nr_releasers);
    Handoff h;
    unsigned int i;

    handoff_init(&h);
    for (i = 0; i < nr_poppers; i++) {
        popper_init(&poppers[i], i, limit, takes, &h);
    }

    for (i = 0; i < nr_releasers; i++) {
        qemu_thread_create(&releasers[i], "releaser", releaser_thread, &h,
                           QEMU_THREAD_JOINABLE);
    }
    for (i = 0; i < nr_poppers; i++) {
        qemu_thread_create(&poppers[i].thread, "popper", popper_thread,
                           &poppers[i], QEMU_THREAD_JOINABLE);
    }
    for (i = 0; i < nr_poppers; i++) {
        qemu_thread_join(&poppers[i].thread);
    }
    handoff_finish(&h);
    for (i = 0; i < nr_releasers; i++) {
        qemu_thread_join(&releasers[i]);
    }

    for (i = 0; i < nr_poppers; i++) {
        g_test_message("pool %u: %u wake-ups for %u takes", i,
                       qatomic_read(&poppers[i].nr_wakes), takes);
        g_assert_cmpuint(qatomic_read(&poppers[i].out), ==, 0);
    }
    for (i = 0; i < nr_poppers; i++) {
        virtqueue_pool_free(poppers[i].pool);
        qemu_sem_destroy(&poppers[i].woken);
    }
}

/* One pool at its limit all the time, three threads giving back */
static void test_limit(void)
{
    run(1, 16, 3, 200000);
}

/* A limit of 2: every other take waits for a wake-up */
static void test_limit_2(void)
{
    run(1, 2, 2, 100000);
}

static void leak_wake(void *opaque)
{
    g_error("wake of a freed pool called");
}

/*
 * Freed with objects out: the pool stays for them, their release does
 * not call the freed device's wake.
 */
static void test_free_with_objects_out(void)
{
    enum { N = 8 };
    VirtQueueElement *elems[N];
    VirtQueuePool *pool;
    int i;

    pool = virtqueue_pool_new(sizeof(VirtQueueElement), 8);
    virtqueue_pool_limit_in_flight(pool, N, leak_wake, NULL);
    for (i = 0; i < N; i++) {
        g_assert_true(virtqueue_pool_may_take(pool));
        elems[i] = virtqueue_pool_alloc(pool, sizeof(VirtQueueElement), 1,
                                        1);
    }
    g_assert_false(virtqueue_pool_may_take(pool));
    /* It warns that N are still in flight */
    virtqueue_pool_free(pool);
    for (i = 0; i < N; i++) {
        virtqueue_pool_release(elems[i]);
    }
}

/*
 * The scratch list virtqueue_pop() maps a chain into: every chain that a
 * queue of up to 1024 entries can carry stays in it, on the stack; only
 * longer ones, which larger queues allow, move to the heap, with what was
 * mapped so far; above the queue's limit it refuses.
 */
static void test_sg_inline(void)
{
    VirtQueueSg QEMU_UNINITIALIZED sg;
    unsigned i;

    virtqueue_sg_init(&sg, 4 * VIRTQUEUE_MAX_SIZE);
    g_assert_true(virtqueue_sg_reserve(&sg, VIRTQUEUE_MAX_SIZE));
    g_assert_true(sg.iov == sg.inline_iov && sg.addr == sg.inline_addr);
    for (i = 0; i < VIRTQUEUE_MAX_SIZE; i++) {
        sg.addr[i] = i;
        sg.iov[i] = (struct iovec) { .iov_base = NULL, .iov_len = i };
    }
    g_assert_true(virtqueue_sg_reserve(&sg, VIRTQUEUE_MAX_SIZE + 1));
    g_assert_true(sg.iov != sg.inline_iov && sg.addr != sg.inline_addr);
    for (i = 0; i < VIRTQUEUE_MAX_SIZE; i++) {
        g_assert_cmpuint(sg.addr[i], ==, i);
        g_assert_cmpuint(sg.iov[i].iov_len, ==, i);
    }
    g_assert_true(virtqueue_sg_reserve(&sg, 4 * VIRTQUEUE_MAX_SIZE));
    g_assert_false(virtqueue_sg_reserve(&sg, 4 * VIRTQUEUE_MAX_SIZE + 1));
    virtqueue_sg_destroy(&sg);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    /* The pools' set-up asserts the BQL, which the stubs never hold */
    rust_bql_mock_lock();
    g_test_add_func("/virtqueue-pool/limit", test_limit);
    g_test_add_func("/virtqueue-pool/limit-2", test_limit_2);
    g_test_add_func("/virtqueue-pool/free-with-objects-out",
                    test_free_with_objects_out);
    g_test_add_func("/virtqueue-sg/inline", test_sg_inline);
    return g_test_run();
}
