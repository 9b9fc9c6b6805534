/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Helpers for the qtests of deep virtio-blk queues and io_uring fixed buffers
 */

#include "qemu/osdep.h"
#include "qemu/bswap.h"
#include "qemu/cutils.h"
#include "qobject/qdict.h"
#include "qobject/qlist.h"
#include "standard-headers/linux/virtio_blk.h"
#include "standard-headers/linux/virtio_config.h"
#include "standard-headers/linux/virtio_pci.h"
#include "standard-headers/linux/virtio_ring.h"
#include "virtio-blk-helpers.h"

#define HUGEPAGES_DIR "/sys/kernel/mm/hugepages/hugepages-2048kB/"

/*
 * The qtest protocol carries a buffer as one line of base64, which QEMU
 * handles in time that grows faster than its length: move big buffers in
 * pieces.
 */
#define QTEST_PIECE (256 * 1024)

static void bufwrite(QTestState *qts, uint64_t gpa, const uint8_t *buf,
                     size_t len)
{
    size_t done;

    for (done = 0; done < len; done += QTEST_PIECE) {
        qtest_bufwrite(qts, gpa + done, buf + done,
                       MIN(QTEST_PIECE, len - done));
    }
}

static void bufread(QTestState *qts, uint64_t gpa, uint8_t *buf, size_t len)
{
    size_t done;

    for (done = 0; done < len; done += QTEST_PIECE) {
        qtest_bufread(qts, gpa + done, buf + done,
                      MIN(QTEST_PIECE, len - done));
    }
}


char *vblk_make_image(uint64_t size)
{
    return vblk_make_image_in(g_get_tmp_dir(), size);
}

char *vblk_make_image_in(const char *dir, uint64_t size)
{
    char *path = g_build_filename(dir, "vblk-test-XXXXXX.img", NULL);
    int fd = g_mkstemp(path);

    g_assert(fd >= 0);
    g_assert_cmpint(ftruncate(fd, size), ==, 0);
    close(fd);
    return path;
}

struct VblkQueue {
    uint16_t *free;             /* stack of free descriptors */
    unsigned nfree;
    uint16_t avail_idx;         /* next avail ring slot to fill */
    uint16_t last_used;         /* used ring entries consumed */
    uint16_t *pending;          /* heads not yet made available */
    unsigned npending;
    int *owner;                 /* head -> index in the running batch */
    struct vring_desc *desc;    /* what the descriptor table should hold */
    unsigned dirty_lo, dirty_hi;    /* entries to write out, [lo, hi) */
    int last_done;              /* batch index completed last */
    uint16_t **chain;           /* head -> its descriptors (direct) */
    unsigned *chain_len;
};

static void queues_init(VblkDev *d)
{
    unsigned q, i;

    d->queues = g_new0(VblkQueue, d->nvqs);
    for (q = 0; q < d->nvqs; q++) {
        VblkQueue *vq = &d->queues[q];
        unsigned size = d->vqs[q]->size;

        vq->free = g_new(uint16_t, size);
        for (i = 0; i < size; i++) {
            vq->free[i] = size - 1 - i;
        }
        vq->nfree = size;
        vq->pending = g_new(uint16_t, size);
        vq->owner = g_new(int, size);
        vq->chain = g_new0(uint16_t *, size);
        vq->chain_len = g_new0(unsigned, size);
        vq->desc = g_new0(struct vring_desc, size);
        vq->dirty_lo = size;
    }
}

static void queues_free(VblkDev *d)
{
    unsigned q, i;

    for (q = 0; q < d->nvqs; q++) {
        VblkQueue *vq = &d->queues[q];

        for (i = 0; i < d->vqs[q]->size; i++) {
            g_free(vq->chain[i]);
        }
        g_free(vq->chain);
        g_free(vq->chain_len);
        g_free(vq->desc);
        g_free(vq->owner);
        g_free(vq->pending);
        g_free(vq->free);
    }
    g_free(d->queues);
}

static void setup_queues(VblkDev *d)
{
    unsigned i;

    d->vqs = g_new0(QVirtQueue *, d->nvqs);
    for (i = 0; i < d->nvqs; i++) {
        d->vqs[i] = qvirtqueue_setup(d->vdev, &d->alloc, i);
    }
}

/* Bring the device up: features, @d->nvqs queues, DRIVER_OK */
static void device_init(VblkDev *d)
{
    uint64_t features;

    qvirtio_start_device(d->vdev);
    features = qvirtio_get_features(d->vdev);
    features &= ~(QVIRTIO_F_BAD_FEATURE | (1ull << VIRTIO_RING_F_EVENT_IDX) |
                  (1ull << VIRTIO_F_RING_PACKED));
    if (d->queues_first) {
        d->vdev->features = features | d->first_features;
        d->vdev->bus->set_features(d->vdev, d->vdev->features);
        d->vdev->features_negotiated = true;   /* libqos checks it */
        setup_queues(d);
    }
    qvirtio_set_features(d->vdev, features | d->extra_features);
    if (!d->queues_first) {
        setup_queues(d);
    }
    queues_init(d);
    qvirtio_set_driver_ok(d->vdev);
}

static void device_fini(VblkDev *d)
{
    unsigned i;

    queues_free(d);     /* it reads the queue sizes */
    for (i = 0; i < d->nvqs; i++) {
        qvirtqueue_cleanup(d->vdev->bus, d->vqs[i], &d->alloc);
    }
    g_free(d->vqs);
    d->vqs = NULL;
}

void vblk_reset(VblkDev *d)
{
    device_fini(d);
    qvirtio_reset(d->vdev);
    device_init(d);
}

uint8_t vblk_device_status(VblkDev *d)
{
    return d->vdev->bus->get_status(d->vdev);
}

VblkDev *vblk_start(uint64_t ram_size, char *image, unsigned nvqs,
                    const char *args_fmt, ...)
{
    VblkDev *d = g_new0(VblkDev, 1);
    QPCIAddress addr = { .devfn = QPCI_DEVFN(4, 0) };
    g_autofree char *args = NULL;
    va_list ap;

    va_start(ap, args_fmt);
    args = g_strdup_vprintf(args_fmt, ap);
    va_end(ap);

    d->ram_size = ram_size;
    d->image = image;
    d->qts = qtest_init(args);
    vblk_wait_pinned(d->qts);

    /*
     * Rings and headers live low in guest RAM, data above is the test's:
     * [1 MiB, ram/2) and [ram/2, ram), or for a tiny guest [64 KiB, 640 KiB)
     * and [1 MiB, ram).
     */
    if (ram_size > 16 * 1024 * 1024) {
        d->data_start = ram_size / 2;
        alloc_init(&d->alloc, 0, 1 << 20, d->data_start, 4096);
    } else {
        d->data_start = 1 << 20;
        alloc_init(&d->alloc, 0, 64 << 10, 640 << 10, 4096);
    }
    d->bus = qpci_new_pc(d->qts, &d->alloc);
    d->pdev = virtio_pci_new(d->bus, &addr);
    g_assert(d->pdev);
    d->vdev = &d->pdev->vdev;
    qvirtio_pci_device_enable(d->pdev);
    d->nvqs = nvqs;
    device_init(d);

    d->capacity = qvirtio_config_readq(d->vdev, 0) * VBLK_SECTOR;
    d->seg_max = qvirtio_config_readl(d->vdev, 12);
    d->shadow = g_malloc0(d->capacity);
    return d;
}

/* The pc machine's ACPI PCI hot-plug eject register, a bit per slot */
#define ACPI_PCIHP_EJECT 0xae08

void vblk_unplug_request(VblkDev *d)
{
    qtest_qmp_device_del_send(d->qts, "vblk0");
}

void vblk_eject(VblkDev *d)
{
    bool gone = false;

    qtest_outl(d->qts, ACPI_PCIHP_EJECT, 1 << 4);
    /*
     * The proxy's child, the virtio device, sends a DEVICE_DELETED of its
     * own (no id) just before it: wait for the one with the id, or the
     * next unplug would take it for its own.
     */
    while (!gone) {
        QDict *ev = qtest_qmp_eventwait_ref(d->qts, "DEVICE_DELETED");
        QDict *data = qdict_get_qdict(ev, "data");

        gone = !g_strcmp0(qdict_get_try_str(data, "device"), "vblk0");
        qobject_unref(ev);
    }
    device_fini(d);
    qvirtio_pci_device_disable(d->pdev);
    g_free(d->pdev);
    d->pdev = NULL;
    d->vdev = NULL;
}

void vblk_plug(VblkDev *d, const char *opts_fmt, ...)
{
    QPCIAddress addr = { .devfn = QPCI_DEVFN(4, 0) };
    g_autofree char *opts = NULL;
    QDict *rsp;
    va_list ap;

    va_start(ap, opts_fmt);
    opts = g_strdup_vprintf(opts_fmt, ap);
    va_end(ap);

    qtest_qmp_send_raw(d->qts, "{'execute': 'device_add', 'arguments': {"
                       "'driver': 'virtio-blk-pci', 'id': 'vblk0',"
                       "'addr': '04.0', %s}}", opts);
    rsp = qtest_qmp_receive(d->qts);
    if (!qdict_haskey(rsp, "return")) {
        g_error("device_add failed: %s",
                qdict_get_str(qdict_get_qdict(rsp, "error"), "desc"));
    }
    qobject_unref(rsp);
    d->pdev = virtio_pci_new(d->bus, &addr);
    g_assert(d->pdev);
    d->vdev = &d->pdev->vdev;
    qvirtio_pci_device_enable(d->pdev);
    device_init(d);
    g_assert_cmpuint(qvirtio_config_readq(d->vdev, 0) * VBLK_SECTOR, ==,
                     d->capacity);
}

void vblk_quit(VblkDev *d)
{
    if (!d->qts) {
        return;
    }
    device_fini(d);
    qvirtio_pci_device_disable(d->pdev);
    g_free(d->pdev);
    qpci_free_pc(d->bus);
    qtest_quit(d->qts);
    d->qts = NULL;
    alloc_destroy(&d->alloc);
}

char *vblk_loop_attach(const char *image)
{
    g_autofree char *cmd = g_strdup_printf("losetup --find --show "
                                           "--sector-size 512 %s", image);
    char *out = NULL;
    int status;

    if (!g_spawn_command_line_sync(cmd, &out, NULL, &status, NULL) ||
        !g_spawn_check_exit_status(status, NULL)) {
        g_free(out);
        return NULL;
    }
    return g_strstrip(out);
}

static void loop_detach(const char *dev)
{
    g_autofree char *cmd = g_strdup_printf("losetup --detach %s", dev);

    g_assert_true(g_spawn_command_line_sync(cmd, NULL, NULL, NULL, NULL));
}

void vblk_stop(VblkDev *d)
{
    g_autofree uint8_t *image = NULL;
    gsize len;
    uint64_t i;

    vblk_quit(d);
    if (d->loop) {
        loop_detach(d->loop);
        g_free(d->loop);
    }

    /* Every byte the guest wrote must be in the image file */
    g_assert(g_file_get_contents(d->image, (char **)&image, &len, NULL));
    g_assert_cmpuint(len, ==, d->capacity);
    for (i = 0; i < len; i++) {
        if (image[i] != d->shadow[i]) {
            g_error("image byte %" PRIu64 " is 0x%02x, expected 0x%02x",
                    i, image[i], d->shadow[i]);
        }
    }
    unlink(d->image);
    g_free(d->image);
    g_free(d->shadow);
    g_free(d);
}

/* Descriptors are written out in bulk before the next kick */
static void write_desc(VblkQueue *q, uint16_t i, uint64_t addr,
                       uint32_t len, uint16_t flags, uint16_t next)
{
    q->desc[i] = (struct vring_desc) {
        .addr = cpu_to_le64(addr),
        .len = cpu_to_le32(len),
        .flags = cpu_to_le16(flags),
        .next = cpu_to_le16(next),
    };
    q->dirty_lo = MIN(q->dirty_lo, i);
    q->dirty_hi = MAX(q->dirty_hi, i + 1u);
}

static void flush_descs(VblkDev *d, QVirtQueue *vq, VblkQueue *q)
{
    if (q->dirty_lo < q->dirty_hi) {
        qtest_memwrite(d->qts, vq->desc + q->dirty_lo * sizeof(q->desc[0]),
                       &q->desc[q->dirty_lo],
                       (q->dirty_hi - q->dirty_lo) * sizeof(q->desc[0]));
    }
    q->dirty_lo = vq->size;
    q->dirty_hi = 0;
}

/* Guest addresses of request @i's header and status byte in the slab */
#define SLOT_SIZE 32
#define SLOT_HDR(slab, i) ((slab) + (uint64_t)(i) * SLOT_SIZE)
#define SLOT_STATUS(slab, i) (SLOT_HDR(slab, i) + 16)

static bool submit(VblkDev *d, VblkIo *io, int idx, uint64_t slab,
                   uint64_t table)
{
    QVirtQueue *vq = d->vqs[io->q];
    VblkQueue *q = &d->queues[io->q];
    bool out = io->type != VIRTIO_BLK_T_IN && io->type != VIRTIO_BLK_T_GET_ID;
    unsigned need = io->indirect ? 1 : io->nsegs + 2;
    uint16_t *descs;
    unsigned i;

    g_assert_cmpuint(need, <=, vq->size);
    if (q->nfree < need) {
        return false;
    }
    descs = g_new(uint16_t, need);
    for (i = 0; i < need; i++) {
        descs[i] = q->free[--q->nfree];
    }
    if (io->indirect) {
        write_desc(q, descs[0], table, (io->nsegs + 2) * 16,
                   VRING_DESC_F_INDIRECT, 0);
    } else {
        write_desc(q, descs[0], SLOT_HDR(slab, idx), 16,
                   VRING_DESC_F_NEXT, descs[1]);
        for (i = 0; i < io->nsegs; i++) {
            write_desc(q, descs[i + 1], io->segs[i].gpa, io->segs[i].len,
                       VRING_DESC_F_NEXT | (out ? 0 : VRING_DESC_F_WRITE),
                       descs[i + 2]);
        }
        write_desc(q, descs[need - 1], SLOT_STATUS(slab, idx), 1,
                   VRING_DESC_F_WRITE, 0);
    }
    g_free(q->chain[descs[0]]);
    q->chain[descs[0]] = descs;
    q->chain_len[descs[0]] = need;
    q->owner[descs[0]] = idx;
    q->pending[q->npending++] = descs[0];
    return true;
}

/* Make the pending heads available in one go and notify the device */
static void kick(VblkDev *d, unsigned qi)
{
    QVirtQueue *vq = d->vqs[qi];
    VblkQueue *q = &d->queues[qi];
    unsigned i;

    if (!q->npending) {
        return;
    }
    flush_descs(d, vq, q);
    for (i = 0; i < q->npending; ) {
        unsigned slot = (q->avail_idx + i) % vq->size;
        unsigned run = MIN(q->npending - i, vq->size - slot);
        g_autofree uint16_t *le = g_new(uint16_t, run);
        unsigned j;

        for (j = 0; j < run; j++) {
            le[j] = cpu_to_le16(q->pending[i + j]);
        }
        qtest_memwrite(d->qts, vq->avail + 4 + 2 * slot, le, 2 * run);
        i += run;
    }
    q->avail_idx += q->npending;
    q->npending = 0;
    qtest_writew(d->qts, vq->avail + 2, q->avail_idx);
    d->vdev->bus->virtqueue_kick(d->vdev, vq);
}

/* Take completed requests off the used ring; returns how many */
static int reap(VblkDev *d, unsigned qi, VblkIo *ios, bool *done,
                int *out_of_order)
{
    QVirtQueue *vq = d->vqs[qi];
    VblkQueue *q = &d->queues[qi];
    uint16_t used = qtest_readw(d->qts, vq->used + 2);
    uint16_t n = used - q->last_used;
    g_autofree struct vring_used_elem *elems = NULL;
    unsigned i, got = 0;

    if (!n) {
        return 0;
    }
    g_assert_cmpuint(n, <=, vq->size);
    elems = g_new(struct vring_used_elem, n);
    while (got < n) {
        unsigned slot = (q->last_used + got) % vq->size;
        unsigned run = MIN(n - got, vq->size - slot);

        qtest_memread(d->qts, vq->used + 4 + slot * sizeof(elems[0]),
                      &elems[got], run * sizeof(elems[0]));
        got += run;
    }
    for (i = 0; i < n; i++) {
        uint16_t head = le32_to_cpu(elems[i].id);
        int idx;

        g_assert_cmpuint(head, <, vq->size);
        g_assert_nonnull(q->chain[head]);   /* a head we made available */
        idx = q->owner[head];
        g_assert_false(done[idx]);
        done[idx] = true;
        if (idx < q->last_done) {
            (*out_of_order)++;
        }
        q->last_done = idx;
        ios[idx].used_len = le32_to_cpu(elems[i].len);
        while (q->chain_len[head]) {
            q->free[q->nfree++] = q->chain[head][--q->chain_len[head]];
        }
        g_free(q->chain[head]);
        q->chain[head] = NULL;
    }
    q->last_used = used;
    return n;
}

static uint64_t write_tables(VblkDev *d, VblkIo *ios, int n, uint64_t slab)
{
    size_t entries = 0, pos = 0;
    g_autofree struct vring_desc *t = NULL;
    uint64_t table;
    int i, j;

    for (i = 0; i < n; i++) {
        entries += ios[i].indirect ? ios[i].nsegs + 2 : 0;
    }
    if (!entries) {
        return 0;
    }
    table = guest_alloc(&d->alloc, entries * sizeof(*t));
    t = g_new0(struct vring_desc, entries);
    for (i = 0; i < n; i++) {
        bool out = ios[i].type != VIRTIO_BLK_T_IN &&
                   ios[i].type != VIRTIO_BLK_T_GET_ID;
        size_t first = pos;

        if (!ios[i].indirect) {
            continue;
        }
        t[pos++] = (struct vring_desc) {
            .addr = cpu_to_le64(SLOT_HDR(slab, i)), .len = cpu_to_le32(16),
            .flags = cpu_to_le16(VRING_DESC_F_NEXT),
            .next = cpu_to_le16(1),
        };
        for (j = 0; j < ios[i].nsegs; j++) {
            t[pos] = (struct vring_desc) {
                .addr = cpu_to_le64(ios[i].segs[j].gpa),
                .len = cpu_to_le32(ios[i].segs[j].len),
                .flags = cpu_to_le16(VRING_DESC_F_NEXT |
                                     (out ? 0 : VRING_DESC_F_WRITE)),
                .next = cpu_to_le16(pos - first + 1),
            };
            pos++;
        }
        t[pos++] = (struct vring_desc) {
            .addr = cpu_to_le64(SLOT_STATUS(slab, i)), .len = cpu_to_le32(1),
            .flags = cpu_to_le16(VRING_DESC_F_WRITE),
        };
    }
    bufwrite(d->qts, table, (uint8_t *)t, entries * sizeof(*t));
    return table;
}

struct VblkBatch {
    VblkDev *d;
    VblkIo *ios;
    int n;
    uint8_t *slots;             /* headers and status bytes, host copy */
    bool *done;
    uint64_t *tables;           /* each request's indirect table */
    uint64_t slab;              /* the same in guest RAM */
    uint64_t table;             /* all indirect tables */
    gint64 deadline;
    int next, finished, out_of_order;
    gulong backoff;
};

static void batch_free(VblkBatch *b)
{
    guest_free(&b->d->alloc, b->slab);
    if (b->table) {
        guest_free(&b->d->alloc, b->table);
    }
    g_free(b->slots);
    g_free(b->done);
    g_free(b->tables);
    g_free(b);
}

/* Submit as much as fits, kick, take completions; returns how many */
static int batch_round(VblkBatch *b)
{
    VblkDev *d = b->d;
    int reaped = 0;
    unsigned q;

    /* Fill every queue as far as it goes, in order */
    while (b->next < b->n &&
           submit(d, &b->ios[b->next], b->next, b->slab,
                  b->tables[b->next])) {
        b->next++;
    }
    for (q = 0; q < d->nvqs; q++) {
        kick(d, q);
    }
    for (q = 0; q < d->nvqs; q++) {
        reaped += reap(d, q, b->ios, b->done, &b->out_of_order);
    }
    b->finished += reaped;
    return reaped;
}

/* Poll gently: the device needs the CPU more than we do */
static void batch_backoff(VblkBatch *b, int reaped)
{
    if (reaped) {
        b->deadline = g_get_monotonic_time() + VBLK_TIMEOUT_US;
        b->backoff = 0;
    } else {
        g_assert(g_get_monotonic_time() < b->deadline);
        b->backoff = MIN(MAX(b->backoff * 2, 50), 2000);
        g_usleep(b->backoff);
    }
}

VblkBatch *vblk_batch_start(VblkDev *d, VblkIo *ios, int n)
{
    VblkBatch *b = g_new0(VblkBatch, 1);
    uint64_t pos;
    int i;
    unsigned q;

    b->d = d;
    b->ios = ios;
    b->n = n;
    b->slots = g_malloc0((size_t)n * SLOT_SIZE);
    b->done = g_new0(bool, n);
    b->tables = g_new0(uint64_t, n);
    b->slab = guest_alloc(&d->alloc, (size_t)n * SLOT_SIZE);
    b->table = write_tables(d, ios, n, b->slab);
    b->deadline = g_get_monotonic_time() + VBLK_TIMEOUT_US;
    pos = b->table;
    for (i = 0; i < n; i++) {
        struct virtio_blk_outhdr *hdr = (void *)&b->slots[i * SLOT_SIZE];

        hdr->type = cpu_to_le32(ios[i].type);
        hdr->sector = cpu_to_le64(ios[i].offset / VBLK_SECTOR);
        b->slots[i * SLOT_SIZE + 16] = 0xff;
        g_assert_cmpuint(ios[i].q, <, d->nvqs);
        if (ios[i].indirect) {
            b->tables[i] = pos;
            pos += (ios[i].nsegs + 2) * sizeof(struct vring_desc);
        }
    }
    bufwrite(d->qts, b->slab, b->slots, (size_t)n * SLOT_SIZE);
    for (q = 0; q < d->nvqs; q++) {
        d->queues[q].last_done = -1;
    }
    batch_round(b);
    return b;
}

int vblk_batch_wait(VblkBatch *b)
{
    VblkDev *d = b->d;
    int i, out_of_order;

    while (b->finished < b->n) {
        batch_backoff(b, batch_round(b));
    }
    bufread(d->qts, b->slab, b->slots, (size_t)b->n * SLOT_SIZE);
    for (i = 0; i < b->n; i++) {
        b->ios[i].status = b->slots[i * SLOT_SIZE + 16];
    }
    out_of_order = b->out_of_order;
    batch_free(b);
    return out_of_order;
}

int vblk_batch_abandon(VblkBatch *b)
{
    VblkDev *d = b->d;
    int i, completed = 0;

    bufread(d->qts, b->slab, b->slots, (size_t)b->n * SLOT_SIZE);
    for (i = 0; i < b->n; i++) {
        b->ios[i].status = b->slots[i * SLOT_SIZE + 16];
        completed += b->ios[i].status != 0xff;
    }
    batch_free(b);
    return completed;
}

int vblk_batch_poll(VblkBatch *b)
{
    batch_round(b);
    return b->finished;
}

int vblk_run(VblkDev *d, VblkIo *ios, int n)
{
    return vblk_batch_wait(vblk_batch_start(d, ios, n));
}

int vblk_run_for(VblkDev *d, VblkIo *ios, int n, gint64 budget_us)
{
    gint64 give_up = g_get_monotonic_time() + budget_us;
    VblkBatch *b = vblk_batch_start(d, ios, n);
    int finished;

    while (b->finished < n && g_get_monotonic_time() < give_up) {
        batch_backoff(b, batch_round(b));
    }
    finished = b->finished;
    if (finished == n) {
        vblk_batch_wait(b);
    } else {
        /* The device may still write the slab and tables: leave them be */
        g_free(b->slots);
        g_free(b->done);
        g_free(b->tables);
        g_free(b);
    }
    return finished;
}

void vblk_run_expect_reset(VblkDev *d, VblkIo *io)
{
    VblkBatch *b = vblk_batch_start(d, io, 1);

    /* The device must not complete it, and must say NEEDS_RESET */
    for (;;) {
        g_assert_cmpint(b->finished, ==, 0);
        if (vblk_device_status(d) & VIRTIO_CONFIG_S_NEEDS_RESET) {
            break;
        }
        batch_backoff(b, 0);
        batch_round(b);
    }
    batch_free(b);
    vblk_reset(d);
}

void vblk_raw_submit(VblkDev *d, unsigned q, const struct vring_desc *descs,
                     int ndescs, const uint16_t *heads, int nheads)
{
    QVirtQueue *vq = d->vqs[q];
    VblkQueue *vbq = &d->queues[q];
    g_autofree uint16_t *ring = g_new(uint16_t, nheads);
    uint16_t avail = vbq->avail_idx;
    int i;

    g_assert_cmpint(ndescs, <=, vq->size);
    g_assert_cmpint(nheads, <=, vq->size);
    qtest_memwrite(d->qts, vq->desc, descs, ndescs * sizeof(descs[0]));
    /* In one write where the heads do not wrap around the ring */
    if (avail % vq->size + nheads <= vq->size) {
        for (i = 0; i < nheads; i++) {
            ring[i] = cpu_to_le16(heads[i]);
        }
        qtest_memwrite(d->qts, vq->avail + 4 + 2 * (avail % vq->size), ring,
                       nheads * sizeof(ring[0]));
    } else {
        for (i = 0; i < nheads; i++) {
            uint16_t slot = (avail + i) % vq->size;

            qtest_writew(d->qts, vq->avail + 4 + 2 * slot, heads[i]);
        }
    }
    vbq->avail_idx += nheads;
    qtest_writew(d->qts, vq->avail + 2, vbq->avail_idx);
    d->vdev->bus->virtqueue_kick(d->vdev, vq);
}

int vblk_raw_collect(VblkDev *d, unsigned q, int nheads,
                     struct vring_used_elem *used, bool *reset)
{
    QVirtQueue *vq = d->vqs[q];
    VblkQueue *vbq = &d->queues[q];
    gint64 deadline = g_get_monotonic_time() + VBLK_TIMEOUT_US;
    int i, got = 0;
    gulong backoff = 0;

    *reset = false;
    while (got < nheads) {
        uint16_t idx = qtest_readw(d->qts, vq->used + 2);
        uint16_t n = idx - vbq->last_used;

        g_assert_cmpuint(n, <=, nheads - got);
        for (i = 0; i < n; i++) {
            uint16_t slot = (vbq->last_used + i) % vq->size;

            qtest_memread(d->qts, vq->used + 4 + slot * sizeof(used[0]),
                          &used[got + i], sizeof(used[0]));
            used[got + i].id = le32_to_cpu(used[got + i].id);
            used[got + i].len = le32_to_cpu(used[got + i].len);
        }
        got += n;
        vbq->last_used = idx;
        if (got == nheads) {
            break;
        }
        if (n) {
            backoff = 0;
            continue;
        }
        if (vblk_device_status(d) & VIRTIO_CONFIG_S_NEEDS_RESET) {
            *reset = true;
            break;
        }
        g_assert(g_get_monotonic_time() < deadline);
        backoff = MIN(MAX(backoff * 2, 20), 1000);
        g_usleep(backoff);
    }
    return got;
}

int vblk_raw_batch(VblkDev *d, unsigned q, const struct vring_desc *descs,
                   int ndescs, const uint16_t *heads, int nheads,
                   struct vring_used_elem *used, bool *reset)
{
    vblk_raw_submit(d, q, descs, ndescs, heads, nheads);
    return vblk_raw_collect(d, q, nheads, used, reset);
}

struct vring_desc vblk_desc(uint64_t addr, uint32_t len, uint16_t flags,
                            uint16_t next)
{
    return (struct vring_desc) {
        .addr = cpu_to_le64(addr), .len = cpu_to_le32(len),
        .flags = cpu_to_le16(flags), .next = cpu_to_le16(next),
    };
}

bool vblk_raw_chain(VblkDev *d, unsigned q, const struct vring_desc *descs,
                    int n, uint8_t *status, uint64_t status_gpa)
{
    struct vring_used_elem used;
    uint16_t head = 0;
    bool reset;

    if (!vblk_raw_batch(d, q, descs, n, &head, 1, &used, &reset)) {
        g_assert_true(reset);
    } else if (status) {
        *status = qtest_readb(d->qts, status_gpa);
    }
    vblk_reset(d);
    return reset;
}

bool vblk_packed_chain(VblkDev *d, unsigned q,
                       const struct vring_packed_desc *descs, int n,
                       uint8_t *status, uint64_t status_gpa,
                       uint16_t *used_id)
{
    QVirtQueue *vq = d->vqs[q];
    g_autofree struct vring_packed_desc *ring =
        g_new(struct vring_packed_desc, n);
    struct vring_packed_desc used;
    gint64 deadline = g_get_monotonic_time() + VBLK_TIMEOUT_US;
    bool reset = false;
    int i;

    /*
     * Fresh from a reset, the driver's wrap counter is 1: a descriptor is
     * available with AVAIL set and USED clear, used with both set.
     */
    g_assert_true(d->extra_features & (1ull << VIRTIO_F_RING_PACKED));
    g_assert_cmpint(n, <=, vq->size);
    for (i = 0; i < n; i++) {
        ring[i] = descs[i];
        ring[i].flags = cpu_to_le16((le16_to_cpu(descs[i].flags) |
                                     1 << VRING_PACKED_DESC_F_AVAIL) &
                                    ~(1 << VRING_PACKED_DESC_F_USED));
    }
    qtest_memwrite(d->qts, vq->desc, ring, n * sizeof(ring[0]));
    d->vdev->bus->virtqueue_kick(d->vdev, vq);

    for (;;) {
        if (vblk_device_status(d) & VIRTIO_CONFIG_S_NEEDS_RESET) {
            reset = true;
            break;
        }
        qtest_memread(d->qts, vq->desc, &used, sizeof(used));
        if (le16_to_cpu(used.flags) & (1 << VRING_PACKED_DESC_F_USED)) {
            if (status) {
                *status = qtest_readb(d->qts, status_gpa);
            }
            if (used_id) {
                *used_id = le16_to_cpu(used.id);
            }
            break;
        }
        g_assert(g_get_monotonic_time() < deadline);
        g_usleep(100);
    }
    vblk_reset(d);
    return reset;
}

void vblk_pattern(uint8_t *buf, size_t len, uint64_t pos, unsigned gen)
{
    size_t i;

    for (i = 0; i < len; i++) {
        uint64_t p = pos + i;

        buf[i] = (uint8_t)((p * 0x9e3779b1u) >> 13) ^ (uint8_t)(p >> 9) ^
                 (uint8_t)(gen * 0x5b + 1);
    }
}

void vblk_fill(VblkDev *d, const VblkIo *io, unsigned gen)
{
    uint64_t pos = io->offset;
    int i;

    for (i = 0; i < io->nsegs; i++) {
        g_autofree uint8_t *buf = g_malloc(io->segs[i].len);

        vblk_pattern(buf, io->segs[i].len, pos, gen);
        bufwrite(d->qts, io->segs[i].gpa, buf, io->segs[i].len);
        g_assert_cmpuint(pos + io->segs[i].len, <=, d->capacity);
        memcpy(d->shadow + pos, buf, io->segs[i].len);
        pos += io->segs[i].len;
    }
}

void vblk_poison(VblkDev *d, const VblkIo *io)
{
    int i;

    for (i = 0; i < io->nsegs; i++) {
        qtest_memset(d->qts, io->segs[i].gpa, 0xa5, io->segs[i].len);
    }
}

void vblk_check(VblkDev *d, const VblkIo *io)
{
    uint64_t pos = io->offset;
    int i;

    for (i = 0; i < io->nsegs; i++) {
        g_autofree uint8_t *buf = g_malloc(io->segs[i].len);
        uint32_t j;

        bufread(d->qts, io->segs[i].gpa, buf, io->segs[i].len);
        for (j = 0; j < io->segs[i].len; j++) {
            if (buf[j] != d->shadow[pos + j]) {
                g_error("read at disk offset %" PRIu64 " (segment %d of %d, "
                        "gpa 0x%" PRIx64 ", queue %u): 0x%02x, expected "
                        "0x%02x", pos + j, i, io->nsegs,
                        io->segs[i].gpa + j, io->q, buf[j],
                        d->shadow[pos + j]);
            }
        }
        pos += io->segs[i].len;
    }
}

void vblk_write_pattern(VblkDev *d, unsigned q, uint64_t offset,
                        const VblkSeg *segs, int nsegs, unsigned gen)
{
    VblkIo io = {
        .q = q, .type = VIRTIO_BLK_T_OUT, .offset = offset,
        .segs = segs, .nsegs = nsegs,
    };

    vblk_fill(d, &io, gen);
    vblk_run(d, &io, 1);
    g_assert_cmpint(io.status, ==, VIRTIO_BLK_S_OK);
}

void vblk_read_verify(VblkDev *d, unsigned q, uint64_t offset,
                      const VblkSeg *segs, int nsegs)
{
    VblkIo io = {
        .q = q, .type = VIRTIO_BLK_T_IN, .offset = offset,
        .segs = segs, .nsegs = nsegs,
    };

    vblk_poison(d, &io);
    vblk_run(d, &io, 1);
    g_assert_cmpint(io.status, ==, VIRTIO_BLK_S_OK);
    vblk_check(d, &io);
}

int vblk_split(VblkSeg *segs, uint64_t gpa, uint64_t total, int n)
{
    uint64_t each = total / n;
    int i;

    g_assert_cmpuint(each * n, ==, total);
    for (i = 0; i < n; i++) {
        segs[i] = (VblkSeg) { .gpa = gpa + i * each, .len = each };
    }
    return n;
}

void vblk_wait_pinned(QTestState *qts)
{
    gint64 deadline = g_get_monotonic_time() + VBLK_TIMEOUT_US;

    for (;;) {
        QDict *rsp = qtest_qmp(qts, "{'execute': 'x-query-io-uring-buffers'}");
        QDict *ret = qdict_get_qdict(rsp, "return");
        bool pinning = ret && qdict_get_bool(ret, "pinning");

        qobject_unref(rsp);
        if (!pinning) {
            return;     /* done, or a QEMU without fixed buffers */
        }
        g_assert_cmpint(g_get_monotonic_time(), <, deadline);
        g_usleep(5 * 1000);
    }
}

QDict *vblk_fixed_info(VblkDev *d)
{
    QDict *rsp = qtest_qmp(d->qts,
                           "{'execute': 'x-query-io-uring-buffers'}");
    QDict *ret;

    g_assert(qdict_haskey(rsp, "return"));
    ret = qdict_get_qdict(rsp, "return");
    qobject_ref(ret);
    qobject_unref(rsp);
    return ret;
}

QDict *vblk_fixed_ring(QDict *info, const char *name)
{
    QListEntry *e;

    QLIST_FOREACH_ENTRY(qdict_get_qlist(info, "rings"), e) {
        QDict *ring = qobject_to(QDict, qlist_entry_obj(e));

        if (g_str_equal(qdict_get_str(ring, "name"), name)) {
            return ring;
        }
    }
    return NULL;
}

uint64_t vblk_ring_fallbacks(QDict *ring, const char *reason)
{
    QListEntry *e;

    QLIST_FOREACH_ENTRY(qdict_get_qlist(ring, "fallbacks"), e) {
        QDict *f = qobject_to(QDict, qlist_entry_obj(e));

        if (g_str_equal(qdict_get_str(f, "reason"), reason)) {
            return qdict_get_uint(f, "count");
        }
    }
    g_error("no fallback count for reason '%s'", reason);
}

static long read_long(const char *path)
{
    g_autofree char *text = NULL;
    long value;

    if (!g_file_get_contents(path, &text, NULL, NULL) ||
        qemu_strtol(g_strstrip(text), NULL, 10, &value) < 0) {
        return -1;
    }
    return value;
}

static void write_long(const char *path, long value)
{
    g_autofree char *text = g_strdup_printf("%ld", value);
    int fd = open(path, O_WRONLY);

    if (fd >= 0) {
        if (write(fd, text, strlen(text)) < 0) {
            g_test_message("could not write %s", path);
        }
        close(fd);
    }
}

static long hugepages_at_start = -1;

/* Give back the hugepages this test reserved */
static void restore_hugepages(void)
{
    write_long(HUGEPAGES_DIR "nr_hugepages", hugepages_at_start);
}

static long map_count_at_start = -1;

static void restore_map_count(void)
{
    write_long("/proc/sys/vm/max_map_count", map_count_at_start);
}

bool vblk_have_map_count(long want)
{
    long now = read_long("/proc/sys/vm/max_map_count");

    if (now < 0 || now >= want) {
        return now >= want;
    }
    if (map_count_at_start < 0) {
        map_count_at_start = now;
        atexit(restore_map_count);
    }
    write_long("/proc/sys/vm/max_map_count", want);
    return read_long("/proc/sys/vm/max_map_count") >= want;
}

bool vblk_have_hugepages(uint64_t bytes)
{
    long want = bytes >> 21;
    long free = read_long(HUGEPAGES_DIR "free_hugepages");
    long total = read_long(HUGEPAGES_DIR "nr_hugepages");

    if (free < 0 || total < 0) {
        return false;
    }
    if (free >= want) {
        return true;
    }
    if (hugepages_at_start < 0) {
        hugepages_at_start = total;
        atexit(restore_hugepages);
    }
    write_long(HUGEPAGES_DIR "nr_hugepages", total + want - free);
    return read_long(HUGEPAGES_DIR "free_hugepages") >= want;
}

/*
 * Write every request of @ios (in one batch), then read each back into
 * poisoned buffers (another batch) and check every byte and the used
 * lengths: status byte only for writes, data plus status for reads.
 */
void vblk_write_read(VblkDev *d, VblkIo *ios, int n, unsigned gen)
{
    int i;

    for (i = 0; i < n; i++) {
        ios[i].type = VIRTIO_BLK_T_OUT;
        vblk_fill(d, &ios[i], gen + i);
    }
    vblk_run(d, ios, n);
    for (i = 0; i < n; i++) {
        g_assert_cmpint(ios[i].status, ==, VIRTIO_BLK_S_OK);
        g_assert_cmpuint(ios[i].used_len, ==, 1);
        ios[i].type = VIRTIO_BLK_T_IN;
        vblk_poison(d, &ios[i]);
    }
    vblk_run(d, ios, n);
    for (i = 0; i < n; i++) {
        uint64_t bytes = 0;
        int j;

        for (j = 0; j < ios[i].nsegs; j++) {
            bytes += ios[i].segs[j].len;
        }
        g_assert_cmpint(ios[i].status, ==, VIRTIO_BLK_S_OK);
        g_assert_cmpuint(ios[i].used_len, ==, bytes + 1);
        vblk_check(d, &ios[i]);
    }
}
