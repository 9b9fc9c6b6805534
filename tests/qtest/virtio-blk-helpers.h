/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Helpers for the virtio-blk qtests: a virtio-blk-pci driver that places
 * data where a test wants it in guest RAM, a pattern every byte of which
 * depends on its disk offset and a generation, and a shadow of the disk
 * to check the image file against at the end.
 */
#ifndef VIRTIO_BLK_HELPERS_H
#define VIRTIO_BLK_HELPERS_H

#include "libqtest.h"
#include "libqos/libqos-malloc.h"
#include "libqos/pci-pc.h"
#include "libqos/virtio-pci.h"
#include "standard-headers/linux/virtio_ring.h"

#define VBLK_SECTOR 512
#define VBLK_TIMEOUT_US (60 * 1000 * 1000)

/* One data segment of a request: guest physical address and length */
typedef struct VblkSeg {
    uint64_t gpa;
    uint32_t len;
} VblkSeg;

/* One request for vblk_run(), and what became of it */
typedef struct VblkIo {
    unsigned q;                 /* virtqueue */
    uint32_t type;              /* VIRTIO_BLK_T_IN, _OUT, ... */
    uint64_t offset;            /* bytes, a multiple of 512 */
    const VblkSeg *segs;
    int nsegs;
    bool indirect;              /* one descriptor, pointing at a table */
    uint8_t status;             /* VIRTIO_BLK_S_* (0xff: none written) */
    uint32_t used_len;          /* as the device reported it */
} VblkIo;

typedef struct VblkQueue VblkQueue;

typedef struct VblkDev {
    QTestState *qts;
    QGuestAllocator alloc;      /* low guest RAM: rings and headers */
    QPCIBus *bus;
    QVirtioPCIDevice *pdev;
    QVirtioDevice *vdev;
    unsigned nvqs;
    QVirtQueue **vqs;
    VblkQueue *queues;          /* the driver's side of each virtqueue */
    uint64_t ram_size;
    uint64_t data_start;        /* guest RAM above here is the test's */
    uint64_t capacity;          /* bytes */
    uint32_t seg_max;           /* from the device's config space */
    uint64_t extra_features;    /* negotiated on top of the defaults */
    /*
     * If set, the device is brought up as the virtio spec forbids: the
     * defaults and @first_features are written first, the queues are set
     * up and enabled under them, and only then are the final features
     * (the defaults and @extra_features) written and FEATURES_OK set.
     */
    bool queues_first;
    uint64_t first_features;
    char *image;                /* the raw image file */
    char *loop;                 /* a loop device over it, or NULL */
    uint8_t *shadow;            /* what the image must hold */
} VblkDev;

/*
 * Start QEMU with @args (memory, a drive over @image and a virtio-blk-pci
 * device with id=vblk0 at addr=04.0) and bring the device up with @nvqs
 * queues.  Guest RAM from half of @ram_size up is left to the test.
 * Takes ownership of @image (from vblk_make_image()).
 */
VblkDev *vblk_start(uint64_t ram_size, char *image, unsigned nvqs,
                    const char *args_fmt, ...) G_GNUC_PRINTF(4, 5);
/*
 * A loop device with 512-byte sectors over @image (root only), or NULL.
 * vblk_stop() detaches the one in @d->loop.
 */
char *vblk_loop_attach(const char *image);

/*
 * Unplug the device: vblk_unplug_request() asks for it (device_del), and
 * vblk_eject() is the guest's answer, an eject of slot 4 (ACPI PCI
 * hot-plug of the pc machine), whatever the device has in flight; it
 * waits for DEVICE_DELETED.  The driver's state of the device goes with
 * it.
 */
void vblk_unplug_request(VblkDev *d);
void vblk_eject(VblkDev *d);
/*
 * Hot-plug a virtio-blk-pci device with id=vblk0 at 04.0 again, with more
 * device_add arguments in @opts_fmt (QMP, strings in single quotes), and
 * bring it up with @d->nvqs queues.  It must have the old capacity.
 */
void vblk_plug(VblkDev *d, const char *opts_fmt, ...) G_GNUC_PRINTF(2, 3);

/* Reset the device and bring it up again with fresh queues */
void vblk_reset(VblkDev *d);
/* The virtio device status (VIRTIO_CONFIG_S_*) */
uint8_t vblk_device_status(VblkDev *d);

/* Quit QEMU (once) */
void vblk_quit(VblkDev *d);
/* Quit QEMU, check the image file against the shadow, delete it */
void vblk_stop(VblkDev *d);

/* A fresh raw image of @size bytes filled with zeroes, in $TMPDIR or @dir */
char *vblk_make_image(uint64_t size);
char *vblk_make_image_in(const char *dir, uint64_t size);

/*
 * Submit @n requests and wait for all of them: as many in flight at once
 * as the queues hold, as a descriptor chain or one indirect descriptor
 * each, descriptor and avail ring updates written in bulk and every queue
 * kicked once per round, completions taken in whatever order the device
 * returns them.  Descriptors are recycled, so a queue serves any number
 * of requests.  Returns how many completed out of submission order.
 */
int vblk_run(VblkDev *d, VblkIo *ios, int n);

/*
 * vblk_run() in two halves, so that a test can act while requests are in
 * flight: vblk_batch_start() submits as many of @ios as the queues hold
 * and kicks, vblk_batch_wait() submits the rest and waits for all of them
 * (and frees the batch).  @ios must stay valid until then.
 */
typedef struct VblkBatch VblkBatch;
VblkBatch *vblk_batch_start(VblkDev *d, VblkIo *ios, int n);
int vblk_batch_wait(VblkBatch *b);
/* Take the completions the device has made, without waiting; how many */
int vblk_batch_poll(VblkBatch *b);
/*
 * The device went away (vblk_unplug()) with @b in flight: take each
 * request's status from guest RAM as the device left it (0xff: it never
 * completed) and free the batch.  Returns how many completed.
 */
int vblk_batch_abandon(VblkBatch *b);

/*
 * vblk_run(), but stop waiting after @budget_us: returns how many requests
 * completed.  The rest stay in flight with their guest memory; reset the
 * device before the next vblk_run().
 */
int vblk_run_for(VblkDev *d, VblkIo *ios, int n, gint64 budget_us);

/* Write @ios, then read them back into poisoned buffers and check them */
void vblk_write_read(VblkDev *d, VblkIo *ios, int n, unsigned gen);

/*
 * Submit a request the device must treat as broken: it sets NEEDS_RESET
 * and never completes it.  Then reset the device.
 */
void vblk_run_expect_reset(VblkDev *d, VblkIo *io);

/*
 * Write @ndescs raw descriptors at the start of queue @q's table, make
 * the @nheads heads available and kick once.  Wait until the device has
 * used all of them or says NEEDS_RESET (*@reset).  Returns how many the
 * device used, their used elements (in CPU byte order) in @used.  The
 * device is not reset: after NEEDS_RESET, call vblk_reset().
 */
int vblk_raw_batch(VblkDev *d, unsigned q, const struct vring_desc *descs,
                   int ndescs, const uint16_t *heads, int nheads,
                   struct vring_used_elem *used, bool *reset);
/* vblk_raw_batch() in two halves: make the heads available and kick... */
void vblk_raw_submit(VblkDev *d, unsigned q, const struct vring_desc *descs,
                     int ndescs, const uint16_t *heads, int nheads);
/* ...and wait for @nheads used elements (or NEEDS_RESET) */
int vblk_raw_collect(VblkDev *d, unsigned q, int nheads,
                     struct vring_used_elem *used, bool *reset);

/*
 * Write @n raw descriptors at the start of queue @q's table, make the one
 * at index 0 available and kick.  Returns true when the device answers
 * with NEEDS_RESET, false when it completes the chain (status in
 * @status, when not NULL).  Either way the device is reset after.
 */
/* A split-ring descriptor, in the device's byte order */
struct vring_desc vblk_desc(uint64_t addr, uint32_t len, uint16_t flags,
                            uint16_t next);

bool vblk_raw_chain(VblkDev *d, unsigned q, const struct vring_desc *descs,
                    int n, uint8_t *status, uint64_t status_gpa);

/*
 * The same on a packed ring (the device must have been reset with
 * VIRTIO_F_RING_PACKED in @d->extra_features): @descs go into slots 0 to
 * @n - 1, marked available (the AVAIL and USED flags are set here), and
 * the buffer id the device returns is put in @used_id.
 */
bool vblk_packed_chain(VblkDev *d, unsigned q,
                       const struct vring_packed_desc *descs, int n,
                       uint8_t *status, uint64_t status_gpa,
                       uint16_t *used_id);

/* Put @io's data (pattern of generation @gen) in guest RAM and the shadow */
void vblk_fill(VblkDev *d, const VblkIo *io, unsigned gen);
/* Overwrite @io's buffers, so that a read that returns too little shows */
void vblk_poison(VblkDev *d, const VblkIo *io);
/* Check that @io's buffers hold what the shadow says the disk holds */
void vblk_check(VblkDev *d, const VblkIo *io);

/* Write/read @segs, one request, with data derived from @offset/@gen */
void vblk_write_pattern(VblkDev *d, unsigned q, uint64_t offset,
                        const VblkSeg *segs, int nsegs, unsigned gen);
void vblk_read_verify(VblkDev *d, unsigned q, uint64_t offset,
                      const VblkSeg *segs, int nsegs);

/* The expected byte at disk offset @pos written in generation @gen */
void vblk_pattern(uint8_t *buf, size_t len, uint64_t pos, unsigned gen);

/* Cut @total bytes at guest address @gpa into @n segments of equal size */
int vblk_split(VblkSeg *segs, uint64_t gpa, uint64_t total, int n);

/* The io_uring fixed buffer state (x-query-io-uring-buffers) */
QDict *vblk_fixed_info(VblkDev *d);

/*
 * Wait until guest RAM registered as fixed buffers is pinned (QEMU pins
 * it in a thread of its own, and requests meanwhile go without fixed
 * buffers).  vblk_start() does; call it after RAM comes later (a DIMM, an
 * incoming migration).  Returns at once where QEMU has no such registry.
 */
void vblk_wait_pinned(QTestState *qts);
/* The ring named @name in @info, or NULL */
QDict *vblk_fixed_ring(QDict *info, const char *name);
/* How many requests of @ring went the normal way for @reason */
uint64_t vblk_ring_fallbacks(QDict *ring, const char *reason);

/*
 * Every request in flight runs in a coroutine with its own stack mapping:
 * tens of thousands of them need more than the default vm.max_map_count.
 * Raise it to @want if needed; false if impossible.
 */
bool vblk_have_map_count(long want);

/* Free 2 MiB hugepages, reserving more if needed; false if impossible */
bool vblk_have_hugepages(uint64_t bytes);

#endif
