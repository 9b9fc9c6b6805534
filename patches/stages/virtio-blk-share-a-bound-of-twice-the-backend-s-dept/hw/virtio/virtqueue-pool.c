/*
 * A virtqueue's pool of request objects
 *
 * Copyright (c) 2026 vblk-uring authors
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qemu/atomic.h"
#include "qemu/coroutine.h"
#include "qemu/error-report.h"
#include "qemu/main-loop.h"
#include "qemu/queue.h"
#include "qemu/thread.h"
#include "qemu/timer.h"
#include "hw/virtio/virtqueue-sg.h"
#include "hw/virtio/virtqueue-pool.h"

/* How long the pool remembers a burst before giving its surplus back */
#define POOL_WINDOW_NS (1 * NANOSECONDS_PER_SECOND)

typedef struct PoolObject PoolObject;
struct PoolObject {
    QSLIST_ENTRY(PoolObject) next;
    VirtQueuePool *pool;
    void *heap_arrays;        /* a long chain's arrays, or NULL */
    /* the device struct, then the inline arrays */
    uint64_t payload[] QEMU_ALIGNED(16);
};

struct VirtQueuePool {
    size_t elem_size;
    size_t object_size;
    unsigned int inline_sg;

    /*
     * Requests in flight at most (UINT_MAX: no limit; else the pool's
     * share of the process-wide budget, or this if less), and who to call
     * when there is room
     * again after virtqueue_pool_may_take() said no (@waiting).
     */
    unsigned int max_in_flight;
    void (*wake)(void *opaque);
    void *wake_opaque;
    bool waiting;              /* atomic */
    VirtQueuePoolGroup *group; /* or NULL */
    /* In the group's list of pools waiting for room; under its lock */
    bool group_queued;         /* atomic reads without the lock */
    bool group_turn;           /* atomic: woken by the group to take */
    bool group_woken;          /* atomic: woken, and not run since */
    QSIMPLEQ_ENTRY(VirtQueuePool) group_next;

    /* Only the popping thread changes these */
    QSLIST_HEAD(, PoolObject) cached;
    unsigned int nr_cached;
    unsigned int nr_taken;     /* atomic reads from other threads */
    unsigned int peak_in_flight;
    int64_t window_start_ns;

    /* Objects given back, from any thread; the popping thread takes all */
    QSLIST_HEAD(, PoolObject) released;
    unsigned int nr_released;  /* atomic */
    unsigned int nr_adopted;   /* atomic */

    unsigned int nr_objects;  /* atomic */
};

static size_t pool_inline_offset(const VirtQueuePool *pool)
{
    return QEMU_ALIGN_UP(pool->elem_size, __alignof__(hwaddr));
}

static size_t pool_inline_arrays_size(const VirtQueuePool *pool)
{
    return virtqueue_element_arrays_size(pool->inline_sg, 0);
}

VirtQueuePool *virtqueue_pool_new(size_t elem_size, unsigned int inline_sg)
{
    VirtQueuePool *pool = g_new0(VirtQueuePool, 1);

    assert(elem_size >= sizeof(VirtQueueElement));
    pool->elem_size = elem_size;
    pool->inline_sg = inline_sg;
    pool->object_size = sizeof(PoolObject) + pool_inline_offset(pool) +
                        pool_inline_arrays_size(pool);
    pool->max_in_flight = UINT_MAX;
    QSLIST_INIT(&pool->cached);
    QSLIST_INIT(&pool->released);
    return pool;
}

/*
 * Every pool with a limit is in the process-wide budget of requests in
 * flight (qemu_coroutine_budget_share()), a limit of its own only lowering
 * its share: it joins when it gets its limit and leaves when it is freed,
 * under the BQL.
 */
void virtqueue_pool_limit_in_flight(VirtQueuePool *pool,
                                    unsigned int max_in_flight,
                                    void (*wake)(void *opaque), void *opaque)
{
    assert(bql_locked());
    assert(pool->max_in_flight == UINT_MAX);
    pool->max_in_flight = max_in_flight;
    pool->wake = wake;
    pool->wake_opaque = opaque;
    qemu_coroutine_budget_join();
}

static void budget_leave(VirtQueuePool *pool)
{
    if (pool->max_in_flight != UINT_MAX) {
        qemu_coroutine_budget_leave();
    }
}

/* Its share of the budget, or less if asked for */
static unsigned int pool_limit(VirtQueuePool *pool)
{
    unsigned int share;

    if (pool->max_in_flight == UINT_MAX) {
        return UINT_MAX;
    }
    share = qemu_coroutine_budget_share();
    return pool->max_in_flight ? MIN(pool->max_in_flight, share) : share;
}

/*
 * Groups of pools that share a bound (see the header).
 *
 * @in_flight is the sum of the members' requests out, changed with atomic
 * operations by every member's popping thread and by whatever thread gives
 * a request back; it is only compared with the bound, so a pool can take
 * on a value a moment old.  Pools join under the BQL before they take
 * anything; the bound may change at any time and is read by any thread.
 *
 * Past its part, a pool takes only while the group is under its bound and
 * nobody waits for room, or when it is its turn.  Refused, it queues
 * itself in @waiters.  Room is handed out in turn: whatever thread gives
 * a request back and finds a batch of room free (an eighth of the bound)
 * wakes the pools at the head of the list, one for every part of room (at
 * least GROUP_WAKE_GRANT places), and gives each its turn.  A pool keeps
 * its turn until the group refuses it again, and then queues at the tail.
 * So the parts can be as small as one request without a wake-up for every
 * completion, and a queue that was refused is served before queues that
 * come later.
 *
 * Until the pools woken have run (@woken_pending), the room they are
 * about to take is not handed out again.  So that a waiting pool is never
 * stuck behind queues that keep the room just under a batch, or behind a
 * woken pool that never runs, the head is also woken once a bound's worth
 * of requests were given back since the last wake-up (@passed), and
 * whenever the group has nothing out: a pool woken may run and take
 * nothing (its ring was empty after all), and if every request came back
 * before it ran, no later release would hand the room on.  A pool
 * refused for its own limit is woken by its own completions instead
 * (pool_maybe_wake()).
 *
 * @lock protects @waiters and every member's @group_queued; it is taken
 * only on the way to sleep and to wake others, never to take or to give
 * back a request.  A waiter queues itself before it looks at the room
 * once more, and a releasing thread lowers @in_flight before it looks at
 * @nr_waiters, with a full barrier between on both sides: either the
 * waiter sees the room, or the releasing thread sees the waiter.
 */
struct VirtQueuePoolGroup {
    unsigned int max_in_flight;   /* atomic; 0: no bound */
    unsigned int share;           /* atomic; each pool's part */
    unsigned int in_flight;       /* atomic */
    unsigned int nr_pools;        /* joined and not freed */

    QemuSpin lock;
    QSIMPLEQ_HEAD(, VirtQueuePool) waiters;
    unsigned int nr_waiters;      /* atomic reads without the lock */
    unsigned int passed;          /* atomic: releases since a wake-up */
    unsigned int woken_pending;   /* atomic: woken pools yet to run */
};

/* Places handed to each pool woken: a wake-up costs a system call or two */
#define GROUP_WAKE_GRANT 8
/* Most pools one release wakes */
#define GROUP_WAKE_MAX 8

VirtQueuePoolGroup *virtqueue_pool_group_new(void)
{
    VirtQueuePoolGroup *group = g_new0(VirtQueuePoolGroup, 1);

    group->share = UINT_MAX;
    qemu_spin_init(&group->lock);
    QSIMPLEQ_INIT(&group->waiters);
    return group;
}

static void group_update_share(VirtQueuePoolGroup *group)
{
    unsigned int max = group->max_in_flight;

    qatomic_set(&group->share,
                max ? MAX(max / MAX(group->nr_pools, 1),
                          VIRTQUEUE_POOL_GROUP_MIN_SHARE) : UINT_MAX);
}

static void group_wake(VirtQueuePoolGroup *group, unsigned int nr);

void virtqueue_pool_group_set_limit(VirtQueuePoolGroup *group,
                                    unsigned int max_in_flight)
{
    qatomic_set(&group->max_in_flight, max_in_flight);
    group_update_share(group);
    /* Whoever waits may find room under the new bound */
    group_wake(group, UINT_MAX);
}

void virtqueue_pool_join(VirtQueuePool *pool, VirtQueuePoolGroup *group)
{
    assert(bql_locked());
    assert(!pool->group && !pool->nr_taken);
    pool->group = group;
    group->nr_pools++;
    group_update_share(group);
}

void virtqueue_pool_group_free(VirtQueuePoolGroup *group)
{
    /* A pool left with requests out still counts them here */
    if (group && !group->nr_pools) {
        qemu_spin_destroy(&group->lock);
        g_free(group);
    }
}

/* Whether the group lets @pool, with @in_flight out, take one more */
static bool group_has_room(VirtQueuePool *pool, unsigned int in_flight)
{
    VirtQueuePoolGroup *group = pool->group;
    unsigned int max;

    if (!group || in_flight < qatomic_read(&group->share)) {
        return true;
    }
    max = qatomic_read(&group->max_in_flight);
    if (!max) {
        return true;
    }
    return qatomic_read(&group->in_flight) < max &&
           (qatomic_read(&pool->group_turn) ||
            !qatomic_read(&group->nr_waiters));
}

/* Refused for the group's sake: queue @pool to be woken (popping thread) */
static void group_enqueue(VirtQueuePoolGroup *group, VirtQueuePool *pool)
{
    qatomic_set(&pool->group_turn, false);
    qemu_spin_lock(&group->lock);
    if (!pool->group_queued) {
        QSIMPLEQ_INSERT_TAIL(&group->waiters, pool, group_next);
        qatomic_set(&pool->group_queued, true);
        qatomic_inc(&group->nr_waiters);
    }
    qemu_spin_unlock(&group->lock);
    /* Pairs with virtqueue_pool_release(): queued before the room is read */
    smp_mb();
}

/* @pool leaves the list, if it is there (popping thread, or freeing) */
static void group_dequeue(VirtQueuePoolGroup *group, VirtQueuePool *pool)
{
    if (!qatomic_read(&pool->group_queued)) {
        return;     /* only the popping thread queues it */
    }
    qemu_spin_lock(&group->lock);
    if (pool->group_queued) {
        QSIMPLEQ_REMOVE(&group->waiters, pool, VirtQueuePool, group_next);
        qatomic_set(&pool->group_queued, false);
        qatomic_dec(&group->nr_waiters);
    }
    qemu_spin_unlock(&group->lock);
}

static void pool_call_wake(VirtQueuePool *pool)
{
    void (*wake)(void *opaque) = qatomic_read(&pool->wake);

    if (wake) {
        wake(pool->wake_opaque);
    }
}

/* Give up to @nr of the pools that wait longest their turn; any thread */
static void group_wake(VirtQueuePoolGroup *group, unsigned int nr)
{
    while (nr) {
        VirtQueuePool *woken[GROUP_WAKE_MAX];
        unsigned int n = 0, i;

        qemu_spin_lock(&group->lock);
        while (n < MIN(nr, GROUP_WAKE_MAX) &&
               !QSIMPLEQ_EMPTY(&group->waiters)) {
            VirtQueuePool *pool = QSIMPLEQ_FIRST(&group->waiters);

            QSIMPLEQ_REMOVE_HEAD(&group->waiters, group_next);
            qatomic_set(&pool->group_queued, false);
            qatomic_dec(&group->nr_waiters);
            qatomic_set(&pool->group_turn, true);
            woken[n++] = pool;
        }
        qatomic_set(&group->passed, 0);
        qemu_spin_unlock(&group->lock);

        /* Outside the lock: a wake-up may take a system call */
        for (i = 0; i < n; i++) {
            if (qatomic_xchg(&woken[i]->waiting, false)) {
                qatomic_inc(&group->woken_pending);
                qatomic_set(&woken[i]->group_woken, true);
                pool_call_wake(woken[i]);
            }
        }
        if (n < GROUP_WAKE_MAX) {
            break;  /* nobody left, or @nr woken */
        }
        nr = nr == UINT_MAX ? nr : nr - n;
    }
}

/* After a release, or a pool queued itself: wake waiters if there is room */
static void group_maybe_wake(VirtQueuePoolGroup *group)
{
    unsigned int max, in_flight, room;
    bool stuck;

    if (likely(!qatomic_read(&group->nr_waiters))) {
        return;
    }
    max = qatomic_read(&group->max_in_flight);
    if (!max) {
        group_wake(group, UINT_MAX);
        return;
    }
    in_flight = qatomic_read(&group->in_flight);
    /* With nothing out, no release is left to come and wake anyone */
    stuck = qatomic_fetch_inc(&group->passed) >= max || !in_flight;
    if (stuck) {
        qatomic_set(&group->woken_pending, 0);
    } else if (qatomic_read(&group->woken_pending)) {
        return;     /* the room is theirs until they run */
    }
    room = in_flight < max ? max - in_flight : 0;
    if (room >= MAX(max / 8, 1)) {
        unsigned int grant = MAX(qatomic_read(&group->share),
                                 GROUP_WAKE_GRANT);

        group_wake(group, DIV_ROUND_UP(room, grant));
    } else if (stuck && room) {
        group_wake(group, 1);
    }
}

/* A pool the group woke runs: its room may be handed out again */
static void group_woken_runs(VirtQueuePoolGroup *group, VirtQueuePool *pool)
{
    unsigned int pending = qatomic_read(&group->woken_pending);

    qatomic_set(&pool->group_woken, false);
    /* Not below 0, where a stuck group forgot who was pending */
    while (pending &&
           qatomic_cmpxchg(&group->woken_pending, pending, pending - 1) !=
           pending) {
        pending = qatomic_read(&group->woken_pending);
    }
}

static VirtQueueElement *object_elem(PoolObject *obj)
{
    return (VirtQueueElement *)obj->payload;
}

static PoolObject *elem_object(VirtQueueElement *elem)
{
    return (PoolObject *)((char *)elem - offsetof(PoolObject, payload));
}

static PoolObject *pool_object_new(VirtQueuePool *pool)
{
    PoolObject *obj = g_malloc(pool->object_size);

    obj->pool = pool;
    obj->heap_arrays = NULL;
    qatomic_inc(&pool->nr_objects);
    return obj;
}

static void pool_object_delete(PoolObject *obj)
{
    qatomic_dec(&obj->pool->nr_objects);
    g_free(obj);
}

/* Lay out the element's arrays for this request: inline or on the heap */
static void object_set_arrays(PoolObject *obj, unsigned int out_num,
                              unsigned int in_num)
{
    VirtQueuePool *pool = obj->pool;
    size_t arrays_size = virtqueue_element_arrays_size(out_num, in_num);
    void *arrays;

    if (out_num + in_num <= pool->inline_sg) {
        arrays = (char *)obj->payload + pool_inline_offset(pool);
    } else {
        obj->heap_arrays = g_malloc(arrays_size);
        arrays = obj->heap_arrays;
    }
    virtqueue_element_set_arrays(object_elem(obj), out_num, in_num, arrays);
}

/*
 * Give back what a burst left: keep as many objects as were in flight at
 * the busiest moment of the last window.
 */
static void pool_trim(VirtQueuePool *pool, unsigned int in_flight)
{
    int64_t now = qemu_clock_get_ns(QEMU_CLOCK_REALTIME);
    unsigned int keep;

    if (now - pool->window_start_ns < POOL_WINDOW_NS) {
        return;
    }
    keep = MAX(pool->peak_in_flight, in_flight);
    while (pool->nr_cached && qatomic_read(&pool->nr_objects) > keep) {
        PoolObject *obj = QSLIST_FIRST(&pool->cached);

        QSLIST_REMOVE_HEAD(&pool->cached, next);
        pool->nr_cached--;
        pool_object_delete(obj);
    }
    pool->peak_in_flight = in_flight;
    pool->window_start_ns = now;
}

/* Objects taken and not given back yet */
static unsigned int pool_in_flight(VirtQueuePool *pool)
{
    return qatomic_read(&pool->nr_taken) + qatomic_read(&pool->nr_adopted) -
           qatomic_read(&pool->nr_released);
}

/* The cache is empty: take what other threads gave back */
static void pool_refill(VirtQueuePool *pool)
{
    QSLIST_HEAD(, PoolObject) released;
    PoolObject *obj, *next;

    QSLIST_MOVE_ATOMIC(&released, &pool->released);
    QSLIST_FOREACH_SAFE(obj, &released, next, next) {
        QSLIST_INSERT_HEAD(&pool->cached, obj, next);
        pool->nr_cached++;
    }
    pool_trim(pool, pool_in_flight(pool));
}

static PoolObject *pool_take(VirtQueuePool *pool)
{
    PoolObject *obj;

    if (QSLIST_EMPTY(&pool->cached)) {
        pool_refill(pool);
    }
    qatomic_set(&pool->nr_taken, pool->nr_taken + 1);
    if (pool->group) {
        qatomic_inc(&pool->group->in_flight);
    }
    pool->peak_in_flight = MAX(pool->peak_in_flight, pool_in_flight(pool));

    obj = QSLIST_FIRST(&pool->cached);
    if (!obj) {
        return pool_object_new(pool);
    }
    QSLIST_REMOVE_HEAD(&pool->cached, next);
    pool->nr_cached--;
    return obj;
}

/* Whether the pool may take one more, by its own limit and its group's */
static bool pool_has_room(VirtQueuePool *pool)
{
    unsigned int in_flight = pool_in_flight(pool);

    return in_flight < pool_limit(pool) && group_has_room(pool, in_flight);
}

bool virtqueue_pool_may_take(VirtQueuePool *pool)
{
    if (unlikely(qatomic_read(&pool->group_woken))) {
        group_woken_runs(pool->group, pool);
    }
    if (likely(pool_has_room(pool))) {
        return true;
    }
    /*
     * A full barrier, that orders the caller's earlier stores too (see
     * virtqueue_pool_may_take() in the header); pairs with the one in
     * virtqueue_pool_release(): either the releasing thread sees
     * @waiting, or we see its release.
     */
    qatomic_xchg(&pool->waiting, true);
    if (pool_has_room(pool) && qatomic_xchg(&pool->waiting, false)) {
        return true;
    }
    if (pool->group && pool_in_flight(pool) < pool_limit(pool)) {
        /*
         * Refused for the group's sake: wait for our turn.  The room may
         * have come since we looked, from a release that saw nobody
         * waiting: then this wakes us (or whoever is first).
         */
        group_enqueue(pool->group, pool);
        group_maybe_wake(pool->group);
    }
    return false;
}

/*
 * Wake the popping thread once half of its own limit is free again, unless
 * it waits for the group's turn (the group wakes it then)
 */
static void pool_maybe_wake(VirtQueuePool *pool)
{
    if (likely(!qatomic_read(&pool->waiting)) ||
        qatomic_read(&pool->group_queued)) {
        return;
    }
    if (pool_in_flight(pool) <= pool_limit(pool) / 2 &&
        qatomic_xchg(&pool->waiting, false)) {
        pool_call_wake(pool);
    }
}

VirtQueueElement *virtqueue_pool_alloc(void *opaque, size_t sz,
                                       unsigned int out_num,
                                       unsigned int in_num)
{
    VirtQueuePool *pool = opaque;
    PoolObject *obj;

    assert(sz == pool->elem_size);
    obj = pool_take(pool);
    object_set_arrays(obj, out_num, in_num);
    return object_elem(obj);
}

VirtQueueElement *virtqueue_pool_adopt(VirtQueuePool *pool,
                                       VirtQueueElement *elem)
{
    PoolObject *obj = pool_object_new(pool);
    VirtQueueElement *copy = object_elem(obj);
    unsigned int out_num = elem->out_num, in_num = elem->in_num;

    qatomic_inc(&pool->nr_adopted);
    if (pool->group) {
        qatomic_inc(&pool->group->in_flight);
    }
    memcpy(copy, elem, pool->elem_size);
    object_set_arrays(obj, out_num, in_num);
    memcpy(copy->in_addr, elem->in_addr, in_num * sizeof(hwaddr));
    memcpy(copy->out_addr, elem->out_addr, out_num * sizeof(hwaddr));
    memcpy(copy->in_sg, elem->in_sg, in_num * sizeof(struct iovec));
    memcpy(copy->out_sg, elem->out_sg, out_num * sizeof(struct iovec));
    g_free(elem);
    return copy;
}

void virtqueue_pool_release(VirtQueueElement *elem)
{
    PoolObject *obj = elem_object(elem);
    VirtQueuePool *pool = obj->pool;

    g_free(obj->heap_arrays);
    obj->heap_arrays = NULL;
    if (pool->group) {
        qatomic_dec(&pool->group->in_flight);
    }
    QSLIST_INSERT_HEAD_ATOMIC(&pool->released, obj, next);
    qatomic_inc(&pool->nr_released);
    /* Pairs with virtqueue_pool_may_take() and group_enqueue() */
    smp_mb__after_rmw();
    pool_maybe_wake(pool);
    if (pool->group) {
        group_maybe_wake(pool->group);
    }
}

void virtqueue_pool_free(VirtQueuePool *pool)
{
    PoolObject *obj, *next;

    if (!pool) {
        return;
    }
    budget_leave(pool);
    if (pool->group) {
        group_dequeue(pool->group, pool);
    }
    pool_refill(pool);
    QSLIST_FOREACH_SAFE(obj, &pool->cached, next, next) {
        pool_object_delete(obj);
    }
    QSLIST_INIT(&pool->cached);
    pool->nr_cached = 0;
    if (qatomic_read(&pool->nr_objects)) {
        /* A request still out would give its object back to a freed pool */
        warn_report("virtqueue pool: %u requests still in flight",
                    qatomic_read(&pool->nr_objects));
        /* The device is going away: leave it be when they come back */
        qatomic_set(&pool->wake, NULL);
        return;
    }
    if (pool->group) {
        pool->group->nr_pools--;
    }
    g_free(pool);
}
