/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * virtqueue request pools across threads
 *
 * A pool is taken from by one thread (the one that pops the virtqueue)
 * and given back to from any thread, without locks.  These tests run
 * that for real: one popping thread per pool takes objects as fast as the
 * pool lets it and hands them to releasing threads through a queue; the
 * releasing threads give them back.  What must hold:
 *  - a pool never has more out than its limit, and a group of pools never
 *    more than its bound plus every pool's part, also where the parts are
 *    one request each;
 *  - pools the group refused take the room that frees up in the order
 *    they were refused, and no pool takes past its part ahead of them;
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
    VirtQueuePoolGroup *group;
    unsigned int limit;         /* of the pool */
    unsigned int takes;         /* how many to take in all */
    QemuSemaphore woken;
    unsigned int nr_wakes;      /* atomic */
    unsigned int out;           /* atomic: taken and not given back */
    Handoff *handoff;
    QemuThread thread;
} Popper;

static unsigned int group_out;      /* atomic, over all poppers */
static unsigned int group_most;     /* atomic */
static unsigned int group_bound;

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
        qatomic_dec(&group_out);
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
        unsigned int out, all;

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
        all = qatomic_fetch_inc(&group_out) + 1;
        g_assert_cmpuint(out, <=, p->limit);
        if (group_bound) {
            unsigned int most = qatomic_read(&group_most);

            while (all > most &&
                   qatomic_cmpxchg(&group_most, most, all) != most) {
                most = qatomic_read(&group_most);
            }
        }
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

/*
 * @nr_poppers pools with a limit of @limit each (and a group bound of
 * @bound if not 0), @nr_releasers threads giving back
 */
static void run(unsigned int nr_poppers, unsigned int limit,
                unsigned int bound, unsigned int nr_releasers,
                unsigned int takes)
{
    g_autofree Popper *poppers = g_new0(Popper, nr_poppers);
    g_autofree QemuThread *releasers = g_new(QemuThread, nr_releasers);
    VirtQueuePoolGroup *group = NULL;
    Handoff h;
    unsigned int i, share;

    handoff_init(&h);
    qatomic_set(&group_out, 0);
    qatomic_set(&group_most, 0);
    group_bound = bound;
    for (i = 0; i < nr_poppers; i++) {
        popper_init(&poppers[i], i, limit, takes, &h);
    }
    if (bound) {
        group = virtqueue_pool_group_new();
        for (i = 0; i < nr_poppers; i++) {
            virtqueue_pool_join(poppers[i].pool, group);
        }
        virtqueue_pool_group_set_limit(group, bound);
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

    share = bound ? MAX(bound / nr_poppers,
                        VIRTQUEUE_POOL_GROUP_MIN_SHARE) : 0;
    for (i = 0; i < nr_poppers; i++) {
        g_test_message("pool %u: %u wake-ups for %u takes", i,
                       qatomic_read(&poppers[i].nr_wakes), takes);
        g_assert_cmpuint(qatomic_read(&poppers[i].out), ==, 0);
    }
    if (bound) {
        /* The bound plus every pool's part, plus one each taking at once */
        g_test_message("group: at most %u out (bound %u, parts of %u)",
                       qatomic_read(&group_most), bound, share);
        g_assert_cmpuint(qatomic_read(&group_most), <=,
                         bound + nr_poppers * (share + 1));
    }

    for (i = 0; i < nr_poppers; i++) {
        virtqueue_pool_free(poppers[i].pool);
        qemu_sem_destroy(&poppers[i].woken);
    }
    virtqueue_pool_group_free(group);
}

/* One pool at its limit all the time, three threads giving back */
static void test_limit(void)
{
    run(1, 16, 0, 3, 200000);
}

/* A limit of 2: every other take waits for a wake-up */
static void test_limit_2(void)
{
    run(1, 2, 0, 2, 100000);
}

/* Four pools sharing a bound of 32, each allowed up to 64 by itself */
static void test_group(void)
{
    run(4, 64, 32, 3, 100000);
}

/* Eight pools sharing a bound of 8: parts of one, every wake from the group */
static void test_group_parts_of_one(void)
{
    run(8, 64, 8, 3, 50000);
}

/* The order in which the group woke pools, by index into the test's pools */
static GString *wake_order;

static void order_wake(void *opaque)
{
    g_string_append_c(wake_order, 'A' + GPOINTER_TO_UINT(opaque));
}

/* Take @n from @pool, which must let us */
static void take(VirtQueuePool *pool, GQueue *out, unsigned int n)
{
    while (n--) {
        g_assert_true(virtqueue_pool_may_take(pool));
        g_queue_push_tail(out, virtqueue_pool_alloc(pool,
                                                    sizeof(VirtQueueElement),
                                                    1, 1));
    }
}

static void give_back(GQueue *out, unsigned int n)
{
    while (n--) {
        virtqueue_pool_release(g_queue_pop_head(out));
    }
}

/*
 * One thread, step by step: four pools share a bound of 8 (parts of 2).
 * D takes its part, A fills the bound, B and C take their part and are
 * refused past it, then A is refused.  The room given back goes to B, C
 * and A in that order, a batch (an eighth of the bound) at a time; D,
 * never refused, cannot take past its part ahead of them, and a pool
 * woken keeps the room it was woken for until it runs.
 */
static void test_group_turns(void)
{
    enum { NPOOLS = 4, BOUND = 8 };
    VirtQueuePool *pools[NPOOLS];
    GQueue out[NPOOLS];
    VirtQueuePoolGroup *group = virtqueue_pool_group_new();
    VirtQueuePool *a, *b, *c, *d;
    unsigned int i;

    wake_order = g_string_new("");
    for (i = 0; i < NPOOLS; i++) {
        pools[i] = virtqueue_pool_new(sizeof(VirtQueueElement), 8);
        virtqueue_pool_limit_in_flight(pools[i], 64, order_wake,
                                       GUINT_TO_POINTER(i));
        virtqueue_pool_join(pools[i], group);
        g_queue_init(&out[i]);
    }
    virtqueue_pool_group_set_limit(group, BOUND);
    a = pools[0], b = pools[1], c = pools[2], d = pools[3];

    take(d, &out[3], 2);
    take(a, &out[0], 6);
    take(b, &out[1], 2);
    g_assert_false(virtqueue_pool_may_take(b));
    take(c, &out[2], 2);
    g_assert_false(virtqueue_pool_may_take(c));
    g_assert_false(virtqueue_pool_may_take(a));
    g_assert_cmpstr(wake_order->str, ==, "");

    /* 12 out of 8: the fifth given back frees a batch, B's turn */
    give_back(&out[0], 4);
    g_assert_cmpstr(wake_order->str, ==, "");
    give_back(&out[0], 1);
    g_assert_cmpstr(wake_order->str, ==, "B");

    /* D, at its part, may not take the room ahead of those waiting */
    g_assert_false(virtqueue_pool_may_take(d));

    /* B runs, takes the room, and is refused again: C's turn next */
    take(b, &out[1], 1);
    g_assert_false(virtqueue_pool_may_take(b));
    give_back(&out[0], 1);
    g_assert_cmpstr(wake_order->str, ==, "BC");
    take(c, &out[2], 1);
    g_assert_false(virtqueue_pool_may_take(c));

    /* Then A; until A runs, more room does not wake anyone else */
    give_back(&out[2], 3);
    g_assert_cmpstr(wake_order->str, ==, "BCA");
    take(a, &out[0], 1);

    /* A ran: the room goes to D, B, C, which queued in that order */
    give_back(&out[0], 1);
    g_assert_cmpstr(wake_order->str, ==, "BCAD");
    /* All but one back, D yet to run: the room is still D's */
    for (i = 0; i < NPOOLS; i++) {
        give_back(&out[i], g_queue_get_length(&out[i]) - (i == 1));
    }
    g_assert_cmpstr(wake_order->str, ==, "BCAD");
    /* The bound lifted: whoever still waits is woken */
    virtqueue_pool_group_set_limit(group, 0);
    g_assert_cmpstr(wake_order->str, ==, "BCADBC");
    give_back(&out[1], 1);
    for (i = 0; i < NPOOLS; i++) {
        virtqueue_pool_free(pools[i]);
    }
    virtqueue_pool_group_free(group);
    g_string_free(wake_order, true);
}

/*
 * A pool woken for its turn may take nothing when it runs: its ring was
 * empty after all (the guest took its requests back, or reset the
 * queue).  B is woken first and A queues behind it; every request then
 * comes back before B runs, so no release after B's run is left to hand
 * the room on.  The group must not wait for one: once it has nothing out,
 * A is woken, or A's queue would stall for good.
 */
static void test_group_woken_takes_nothing(void)
{
    enum { BOUND = 16 };
    VirtQueuePoolGroup *group = virtqueue_pool_group_new();
    VirtQueuePool *a, *b;
    GQueue out_a = G_QUEUE_INIT, out_b = G_QUEUE_INIT;

    wake_order = g_string_new("");
    a = virtqueue_pool_new(sizeof(VirtQueueElement), 8);
    b = virtqueue_pool_new(sizeof(VirtQueueElement), 8);
    virtqueue_pool_limit_in_flight(a, 64, order_wake, GUINT_TO_POINTER(0));
    virtqueue_pool_limit_in_flight(b, 64, order_wake, GUINT_TO_POINTER(1));
    virtqueue_pool_join(a, group);
    virtqueue_pool_join(b, group);
    virtqueue_pool_group_set_limit(group, BOUND);

    /* A past its part to the bound, B its part of 8: 20 out of 16 */
    take(a, &out_a, 12);
    take(b, &out_b, 8);
    g_assert_false(virtqueue_pool_may_take(b));
    g_assert_false(virtqueue_pool_may_take(a));

    /* A batch of room: B's turn, and the room is B's until it runs */
    give_back(&out_a, 6);
    g_assert_cmpstr(wake_order->str, ==, "B");
    give_back(&out_a, 6);
    give_back(&out_b, 8);
    /* Nothing out: A must not wait for B to run */
    g_assert_cmpstr(wake_order->str, ==, "BA");

    /* B runs and finds nothing to take; A takes the whole bound */
    g_assert_true(virtqueue_pool_may_take(b));
    take(a, &out_a, BOUND);
    give_back(&out_a, BOUND);

    virtqueue_pool_free(a);
    virtqueue_pool_free(b);
    virtqueue_pool_group_free(group);
    g_string_free(wake_order, true);
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
    g_test_add_func("/virtqueue-pool/group", test_group);
    g_test_add_func("/virtqueue-pool/group-parts-of-one",
                    test_group_parts_of_one);
    g_test_add_func("/virtqueue-pool/group-turns", test_group_turns);
    g_test_add_func("/virtqueue-pool/group-woken-takes-nothing",
                    test_group_woken_takes_nothing);
    g_test_add_func("/virtqueue-pool/free-with-objects-out",
                    test_free_with_objects_out);
    g_test_add_func("/virtqueue-sg/inline", test_sg_inline);
    return g_test_run();
}
