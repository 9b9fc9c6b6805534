/*
 * A virtqueue's pool of request objects
 *
 * Copyright (c) 2026 vblk-uring authors
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qemu/atomic.h"
#include "qemu/error-report.h"
#include "qemu/queue.h"
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
    QSLIST_INIT(&pool->cached);
    QSLIST_INIT(&pool->released);
    return pool;
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
    pool->peak_in_flight = MAX(pool->peak_in_flight, pool_in_flight(pool));

    obj = QSLIST_FIRST(&pool->cached);
    if (!obj) {
        return pool_object_new(pool);
    }
    QSLIST_REMOVE_HEAD(&pool->cached, next);
    pool->nr_cached--;
    return obj;
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
    QSLIST_INSERT_HEAD_ATOMIC(&pool->released, obj, next);
    qatomic_inc(&pool->nr_released);
}

void virtqueue_pool_free(VirtQueuePool *pool)
{
    PoolObject *obj, *next;

    if (!pool) {
        return;
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
        return;
    }
    g_free(pool);
}
