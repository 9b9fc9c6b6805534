/*
 * A virtqueue's pool of request objects
 *
 * Copyright (c) 2026 vblk-uring authors
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef HW_VIRTIO_VIRTQUEUE_POOL_H
#define HW_VIRTIO_VIRTQUEUE_POOL_H

#include "hw/virtio/virtio.h"
#include "qemu/coroutine.h"

/*
 * Requests of one virtqueue: a device struct that starts with a
 * VirtQueueElement, with room for the element's arrays of up to
 * @inline_sg pieces.  Longer chains take their arrays from the heap.
 *
 * Objects are taken by the thread that pops the virtqueue (one at a time,
 * as virtqueue_pop() requires) and given back from any thread.  The pool
 * holds as many objects as requests were in flight at once recently:
 * after a burst, the surplus goes back to the heap once the queue has
 * been used for a while at a lower depth.
 */
typedef struct VirtQueuePool VirtQueuePool;

VirtQueuePool *virtqueue_pool_new(size_t elem_size, unsigned int inline_sg);

/* A pool in the process-wide budget may always keep this many out */
#define VIRTQUEUE_POOL_MIN_IN_FLIGHT QEMU_COROUTINE_MIN_SHARE

/*
 * Let at most the pool's share of a budget for the whole process be out
 * at once, or @max_in_flight if not 0 and less: the pools share what
 * coroutine stacks the host allows in equal parts (see virtqueue-pool.c).
 * Past its limit virtqueue_pool_may_take() says no, and once half of the
 * limit is free again the thread that gives back a request calls
 * @wake(@opaque) (any thread; it must not allocate or block).  Once per
 * pool, under the BQL.
 */
void virtqueue_pool_limit_in_flight(VirtQueuePool *pool,
                                    unsigned int max_in_flight,
                                    void (*wake)(void *opaque), void *opaque);

/*
 * Whether the popping thread may take another request now.  When it says
 * no, @wake will be called, and stores the caller made before the call
 * are visible to @wake.
 */
bool virtqueue_pool_may_take(VirtQueuePool *pool);

/* Every object must have been given back. */
void virtqueue_pool_free(VirtQueuePool *pool);

/*
 * A group of pools that share one bound on requests in flight, for a
 * device whose queues all feed one backend: past what keeps the backend
 * busy, requests are better left in the rings than taken only to wait.
 *
 * The bound is soft.  Each pool may always have its equal part of it out
 * (at least VIRTQUEUE_POOL_GROUP_MIN_SHARE), so that a queue is never
 * shut out by busier ones; beyond that it takes while the group is under
 * the bound and no other pool waits for room, or when the group gave it
 * its turn.  Pools refused for the group's sake are woken in the order
 * they were refused, once a batch of room is free (see virtqueue-pool.c).
 * So the group has at most the bound plus every pool's part out, and
 * threads that take at the same moment may overshoot by one each.  A
 * pool's own limit applies as well.
 */
typedef struct VirtQueuePoolGroup VirtQueuePoolGroup;

#define VIRTQUEUE_POOL_GROUP_MIN_SHARE 1

VirtQueuePoolGroup *virtqueue_pool_group_new(void);

/* After the group's pools were freed */
void virtqueue_pool_group_free(VirtQueuePoolGroup *group);

/* Before @pool takes anything; under the BQL */
void virtqueue_pool_join(VirtQueuePool *pool, VirtQueuePoolGroup *group);

/*
 * Bound the group to @max_in_flight requests out (0: no bound), once its
 * pools have joined.  Any thread; pools see it from their next take.
 */
void virtqueue_pool_group_set_limit(VirtQueuePoolGroup *group,
                                    unsigned int max_in_flight);

/* A VirtQueueElementAlloc for virtqueue_pop_alloc(), @opaque the pool */
VirtQueueElement *virtqueue_pool_alloc(void *opaque, size_t sz,
                                       unsigned int out_num,
                                       unsigned int in_num);

/*
 * Take over an element that virtqueue_alloc_element() made (as
 * qemu_get_virtqueue_element() does): returns a pool object holding the
 * same element, and frees @elem.  Not for the popping thread's hot path.
 */
VirtQueueElement *virtqueue_pool_adopt(VirtQueuePool *pool,
                                       VirtQueueElement *elem);

/* Give an object back; any thread. */
void virtqueue_pool_release(VirtQueueElement *elem);

#endif
