/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Helpers for the vblk-uring qtests
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
#include "vblk-common.h"

#define HUGEPAGES_DIR "/sys/kernel/mm/hugepages/hugepages-2048kB/"

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

VblkDev *vblk_start(uint64_t ram_size, char *image, unsigned nvqs,
                    const char *args_fmt, ...)
{
    VblkDev *d = g_new0(VblkDev, 1);
    QPCIAddress addr = { .devfn = QPCI_DEVFN(4, 0) };
    g_autofree char *args = NULL;
    uint64_t features;
    va_list ap;
    unsigned i;

    va_start(ap, args_fmt);
    args = g_strdup_vprintf(args_fmt, ap);
    va_end(ap);

    d->ram_size = ram_size;
    d->data_start = ram_size / 2;
    d->image = image;
    d->qts = qtest_init(args);

    /* Rings and headers live in [1 MiB, ram/2); data above is ours */
    alloc_init(&d->alloc, 0, 1 << 20, d->data_start, 4096);
    d->bus = qpci_new_pc(d->qts, &d->alloc);
    d->pdev = virtio_pci_new(d->bus, &addr);
    g_assert(d->pdev);
    d->vdev = &d->pdev->vdev;
    qvirtio_pci_device_enable(d->pdev);
    qvirtio_start_device(d->vdev);

    features = qvirtio_get_features(d->vdev);
    features &= ~(QVIRTIO_F_BAD_FEATURE |
                  (1ull << VIRTIO_RING_F_INDIRECT_DESC) |
                  (1ull << VIRTIO_RING_F_EVENT_IDX));
    qvirtio_set_features(d->vdev, features);

    d->capacity = qvirtio_config_readq(d->vdev, 0) * VBLK_SECTOR;
    d->shadow = g_malloc0(d->capacity);

    d->nvqs = nvqs;
    d->vqs = g_new0(QVirtQueue *, nvqs);
    for (i = 0; i < nvqs; i++) {
        d->vqs[i] = qvirtqueue_setup(d->vdev, &d->alloc, i);
    }
    qvirtio_set_driver_ok(d->vdev);
    return d;
}

void vblk_quit(VblkDev *d)
{
    unsigned i;

    if (!d->qts) {
        return;
    }
    for (i = 0; i < d->nvqs; i++) {
        qvirtqueue_cleanup(d->vdev->bus, d->vqs[i], &d->alloc);
    }
    qvirtio_pci_device_disable(d->pdev);
    g_free(d->pdev);
    qpci_free_pc(d->bus);
    qtest_quit(d->qts);
    d->qts = NULL;
    alloc_destroy(&d->alloc);
}

void vblk_stop(VblkDev *d)
{
    g_autofree uint8_t *image = NULL;
    gsize len;
    uint64_t i;

    vblk_quit(d);

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
    g_free(d->vqs);
    g_free(d->shadow);
    g_free(d);
}

/*
 * Requests go one at a time, so every descriptor is free again when one
 * completes: start the next chain at the head of the table.
 */
static void vq_recycle(QVirtQueue *vq)
{
    vq->free_head = 0;
    vq->num_free = vq->size;
}

uint8_t vblk_rw(VblkDev *d, unsigned q, bool write, uint64_t offset,
                const VblkSeg *segs, int nsegs)
{
    QTestState *qts = d->qts;
    QVirtQueue *vq = d->vqs[q];
    struct virtio_blk_outhdr hdr = {
        .type = cpu_to_le32(write ? VIRTIO_BLK_T_OUT : VIRTIO_BLK_T_IN),
        .sector = cpu_to_le64(offset / VBLK_SECTOR),
    };
    uint64_t hdr_gpa = guest_alloc(&d->alloc, sizeof(hdr) + 1);
    uint64_t status_gpa = hdr_gpa + sizeof(hdr);
    uint32_t head, len;
    uint8_t status;
    int i;

    g_assert_cmpint(nsegs + 2, <=, vq->size);
    vq_recycle(vq);
    qtest_memwrite(qts, hdr_gpa, &hdr, sizeof(hdr));
    qtest_writeb(qts, status_gpa, 0xff);

    head = qvirtqueue_add(qts, vq, hdr_gpa, sizeof(hdr), false, true);
    for (i = 0; i < nsegs; i++) {
        qvirtqueue_add(qts, vq, segs[i].gpa, segs[i].len, !write, true);
    }
    qvirtqueue_add(qts, vq, status_gpa, 1, true, false);
    qvirtqueue_kick(qts, d->vdev, vq, head);
    qvirtio_wait_used_elem(qts, d->vdev, vq, head, &len, VBLK_TIMEOUT_US);

    status = qtest_readb(qts, status_gpa);
    guest_free(&d->alloc, hdr_gpa);
    return status;
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

void vblk_write_pattern(VblkDev *d, unsigned q, uint64_t offset,
                        const VblkSeg *segs, int nsegs, unsigned gen)
{
    uint64_t pos = offset;
    int i;

    for (i = 0; i < nsegs; i++) {
        g_autofree uint8_t *buf = g_malloc(segs[i].len);

        vblk_pattern(buf, segs[i].len, pos, gen);
        qtest_bufwrite(d->qts, segs[i].gpa, buf, segs[i].len);
        g_assert_cmpuint(pos + segs[i].len, <=, d->capacity);
        memcpy(d->shadow + pos, buf, segs[i].len);
        pos += segs[i].len;
    }
    g_assert_cmpint(vblk_rw(d, q, true, offset, segs, nsegs), ==,
                    VIRTIO_BLK_S_OK);
}

void vblk_read_verify(VblkDev *d, unsigned q, uint64_t offset,
                      const VblkSeg *segs, int nsegs)
{
    uint64_t pos = offset;
    int i;

    /* Poison the buffers so a short transfer cannot pass */
    for (i = 0; i < nsegs; i++) {
        qtest_memset(d->qts, segs[i].gpa, 0xa5, segs[i].len);
    }
    g_assert_cmpint(vblk_rw(d, q, false, offset, segs, nsegs), ==,
                    VIRTIO_BLK_S_OK);
    for (i = 0; i < nsegs; i++) {
        g_autofree uint8_t *buf = g_malloc(segs[i].len);
        uint32_t j;

        qtest_bufread(d->qts, segs[i].gpa, buf, segs[i].len);
        for (j = 0; j < segs[i].len; j++) {
            if (buf[j] != d->shadow[pos + j]) {
                g_error("read at disk offset %" PRIu64 " (segment %d of %d, "
                        "gpa 0x%" PRIx64 "): 0x%02x, expected 0x%02x",
                        pos + j, i, nsegs, segs[i].gpa + j, buf[j],
                        d->shadow[pos + j]);
            }
        }
        pos += segs[i].len;
    }
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
    return qdict_get_int(qdict_get_qdict(ring, "fallbacks"), reason);
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

static long hugepages_at_start = -1;

/* Give back the hugepages this test reserved */
static void restore_hugepages(void)
{
    g_autofree char *nr = g_strdup_printf("%ld", hugepages_at_start);
    int fd = open(HUGEPAGES_DIR "nr_hugepages", O_WRONLY);

    if (fd >= 0) {
        if (write(fd, nr, strlen(nr)) < 0) {
            g_test_message("could not give back hugepages");
        }
        close(fd);
    }
}

bool vblk_have_hugepages(uint64_t bytes)
{
    long want = bytes >> 21;
    long free = read_long(HUGEPAGES_DIR "free_hugepages");
    long total = read_long(HUGEPAGES_DIR "nr_hugepages");
    g_autofree char *more = NULL;
    ssize_t written;
    int fd;

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
    more = g_strdup_printf("%ld", total + want - free);
    fd = open(HUGEPAGES_DIR "nr_hugepages", O_WRONLY);
    if (fd < 0) {
        return false;
    }
    written = write(fd, more, strlen(more));
    close(fd);
    return written > 0 && read_long(HUGEPAGES_DIR "free_hugepages") >= want;
}
