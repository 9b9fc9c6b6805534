/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * virtio-blk against random descriptor chains: batches of valid requests
 * mixed with broken ones, made available together on a split ring.  After
 * each batch the device has either completed every chain, the valid ones
 * with the right data and the bad ones with the status they deserve, or
 * it is in NEEDS_RESET, in which case it is reset and must serve requests
 * again.  QEMU never dies; at the end every byte of the disk is written,
 * read back and compared with the image file.
 *
 * The seed is fixed (printed at the start); VBLK_FUZZ_SEED picks another
 * and VBLK_FUZZ_CHAINS the number of chains per case.
 */

#include "qemu/osdep.h"
#include "qemu/bswap.h"
#include "qemu/cutils.h"
#include "qemu/units.h"
#include "standard-headers/linux/virtio_blk.h"
#include "standard-headers/linux/virtio_config.h"
#include "standard-headers/linux/virtio_ring.h"
#include "virtio-blk-helpers.h"

#define DEFAULT_SEED 20260401u
#define DEFAULT_CHAINS 6000

#define DISK_SIZE (8 * MiB)
#define VALID_SIZE (DISK_SIZE / 2)  /* valid requests; the rest is junk's */
#define REGION (64 * KiB)           /* one valid request's disk range */
#define MAX_CHAINS 16               /* per batch */
#define MAX_SEGS 8

#define W VRING_DESC_F_WRITE
#define N VRING_DESC_F_NEXT
#define I VRING_DESC_F_INDIRECT

/* What a chain is, and what the device must make of it */
typedef enum Kind {
    VALID,
    /*
     * the device must break (NEEDS_RESET) and never complete these, and
     * OUTSIDE_RAM and IN_MMIO (data buffers where no guest RAM is)
     */
    LOOP, NEXT_OOB, IND_ZERO, IND_ODD, IND_FAR, SHORT_HDR, NO_STATUS,
    REVERSED, ZERO_LEN,
    /* these complete, with the status given */
    IND_NESTED, OUTSIDE_RAM, IN_MMIO, PAST_END, OVERFLOW, UNSUPPORTED,
    /* anything but a crash */
    GARBAGE,
    KIND_MAX,
} Kind;

static const char *const kind_names[KIND_MAX] = {
    "valid", "loop", "next-oob", "indirect-len-0", "indirect-len-odd",
    "indirect-outside-ram", "short-header", "no-status", "reversed",
    "zero-length", "nested-indirect", "outside-ram", "mmio", "past-end",
    "overflow", "unsupported", "garbage",
};

static bool kind_breaks(Kind k)
{
    return (k >= LOOP && k <= ZERO_LEN) || k == OUTSIDE_RAM || k == IN_MMIO;
}

typedef struct Chain {
    Kind kind;
    uint16_t head;
    uint32_t type;
    uint64_t offset;            /* VALID: disk offset */
    uint32_t len;               /* VALID: data bytes */
    uint64_t data;              /* VALID: its buffer in guest RAM */
    bool used;
    uint32_t used_len;
} Chain;

typedef struct Fuzz {
    VblkDev *d;
    GRand *rand;
    uint16_t qsize;
    uint8_t *known;             /* per sector: the shadow is right */
    unsigned gen;
    /* guest RAM */
    uint64_t hdrs, tables, data, scratch;
    /* statistics */
    unsigned batches, resets, chains, completed;
    unsigned per_kind[KIND_MAX];
} Fuzz;

static uint32_t rnd(Fuzz *f, uint32_t n)
{
    return g_rand_int_range(f->rand, 0, n);
}

static uint64_t hdr_addr(Fuzz *f, int c)
{
    return f->hdrs + c * 32;
}

static uint64_t status_addr(Fuzz *f, int c)
{
    return f->hdrs + c * 32 + 16;
}

static uint64_t table_addr(Fuzz *f, int c)
{
    return f->tables + c * 4096;
}

/*
 * A garbage chain's own header and indirect table.  Its descriptors have
 * random lengths, up to 4 GiB: they start above everything that valid
 * chains use (headers, status bytes, tables, data), so that whatever the
 * junk reads or writes, it cannot reach another chain's memory.
 */
static uint64_t junk_hdr_addr(Fuzz *f, int c)
{
    return f->scratch + MiB + c * 8 * KiB;
}

static uint64_t junk_table_addr(Fuzz *f, int c)
{
    return junk_hdr_addr(f, c) + 4 * KiB;
}

static void write_hdr_at(Fuzz *f, uint64_t gpa, uint32_t type,
                         uint64_t sector)
{
    struct virtio_blk_outhdr hdr = {
        .type = cpu_to_le32(type), .sector = cpu_to_le64(sector),
    };
    uint8_t buf[17];

    memcpy(buf, &hdr, 16);
    buf[16] = 0xff;
    qtest_memwrite(f->d->qts, gpa, buf, sizeof(buf));
}

static void write_hdr(Fuzz *f, int c, uint32_t type, uint64_t sector)
{
    write_hdr_at(f, hdr_addr(f, c), type, sector);
}

/* A sector of the junk half of the disk */
static uint64_t junk_sector(Fuzz *f)
{
    return (VALID_SIZE + rnd(f, (DISK_SIZE - VALID_SIZE) / 512 - 128) * 512) /
           VBLK_SECTOR;
}

/* An address a garbage descriptor may point at */
static uint64_t junk_addr(Fuzz *f)
{
    switch (rnd(f, 6)) {
    case 0:
        return f->scratch + rnd(f, MiB);
    case 1:
        return 16 * GiB + rnd(f, MiB);
    case 2:
        return 0xfebf0000 + rnd(f, 0x1000);
    case 3:
        return UINT64_MAX - rnd(f, 8192);   /* wraps round */
    case 4:
        return f->d->ram_size - rnd(f, 8192);  /* runs off the end of RAM */
    default:
        return (uint64_t)g_rand_int(f->rand) << 32 | g_rand_int(f->rand) |
               (1ull << 40);
    }
}

static uint32_t junk_len(Fuzz *f)
{
    switch (rnd(f, 5)) {
    case 0:
        return rnd(f, 17);
    case 1:
        return 512 * (1 + rnd(f, 16));
    case 2:
        return g_rand_int(f->rand);
    default:
        return 1 + rnd(f, 8192);
    }
}

/*
 * Cut @len bytes at @gpa into 1 to MAX_SEGS segments of any size and
 * write them as descriptors @t[0..], each one chained to the next.
 */
static int data_descs(Fuzz *f, struct vring_desc *t, uint16_t first,
                      uint64_t gpa, uint32_t len, uint16_t flags, int max)
{
    int n = 1 + rnd(f, max), i;
    uint32_t done = 0;

    n = MIN(n, len);
    for (i = 0; i < n; i++) {
        uint32_t left = len - done;
        uint32_t piece = i == n - 1 ? left :
                         1 + rnd(f, left - (n - 1 - i));

        t[i] = vblk_desc(gpa + done, piece, flags | N, first + i + 1);
        done += piece;
    }
    return n;
}

/*
 * Following NEXT from the head of a direct chain at @tab[@base] stays in
 * its own @n entries, or leaves the table: never into the next chain.
 */
static void assert_own_entries(Fuzz *f, const struct vring_desc *tab,
                               uint16_t base, int n)
{
    uint16_t i = base;
    int steps;

    for (steps = 0; steps <= n && i < f->qsize; steps++) {
        g_assert_cmpuint(i, >=, base);
        g_assert_cmpuint(i, <, base + n);
        if (!(le16_to_cpu(tab[i].flags) & N)) {
            break;
        }
        i = le16_to_cpu(tab[i].next);
    }
}

/*
 * Build chain @c of kind @ch->kind.  Direct chains take descriptors from
 * @tab[*@used] on; indirect ones get a table of their own.
 */
static void build(Fuzz *f, int c, Chain *ch, struct vring_desc *tab,
                  unsigned *used)
{
    VblkDev *d = f->d;
    struct vring_desc t[MAX_SEGS + 4];
    /*
     * The header may run on into the next descriptor (virtio has no
     * framing): it is only too short when writable data follows it.
     */
    bool out = rnd(f, 2) && ch->kind != SHORT_HDR;
    bool indirect = ch->kind == IND_ZERO || ch->kind == IND_ODD ||
                    ch->kind == IND_NESTED || ch->kind == IND_FAR ||
                    !rnd(f, ch->kind == GARBAGE ? 2 : 4);
    uint16_t base = indirect ? 0 : *used;
    uint16_t dflags = out ? 0 : W;
    uint64_t sector = junk_sector(f);
    int n = 0, i;

    ch->type = out ? VIRTIO_BLK_T_OUT : VIRTIO_BLK_T_IN;
    ch->data = f->data + c * REGION;
    ch->len = 512 * (1 + rnd(f, REGION / 512));
    switch (ch->kind) {
    case OUTSIDE_RAM:
    case IN_MMIO:
        ch->len = 512 * (1 + rnd(f, 4));
        break;
    case VALID:
        sector = ch->offset / VBLK_SECTOR;
        break;
    case PAST_END:
        sector = d->capacity / VBLK_SECTOR - rnd(f, 2);
        ch->len = MAX(ch->len, 1024);
        break;
    case OVERFLOW:
        sector = UINT64_MAX - rnd(f, 1 << 20);
        break;
    case UNSUPPORTED:
        ch->type = 0x100 + rnd(f, 0x1000);
        break;
    default:
        break;
    }
    write_hdr(f, c, ch->type, sector);

    t[n++] = vblk_desc(hdr_addr(f, c), 16, N, base + 1);
    n += data_descs(f, &t[n], base + n, ch->data, ch->len, dflags,
                    ch->kind == OUTSIDE_RAM || ch->kind == IN_MMIO ?
                    1 : MAX_SEGS);
    t[n++] = vblk_desc(status_addr(f, c), 1, W, 0);

    switch (ch->kind) {
    case LOOP:
        /* the last data descriptor points back into the chain */
        t[n - 2].next = cpu_to_le16(base + rnd(f, n - 1));
        break;
    case NEXT_OOB:
        i = rnd(f, n - 1);
        t[i].next = cpu_to_le16(indirect ? n + rnd(f, 1000) :
                                f->qsize + rnd(f, 0x10000 - f->qsize));
        break;
    case SHORT_HDR:
        t[0].len = cpu_to_le32(rnd(f, 16));
        break;
    case NO_STATUS:
        t[n - 2].flags &= cpu_to_le16(~N);
        n--;
        if (!out) {
            /* a read still has writable data: make the header the end */
            t[0].flags = 0;
            n = 1;
        }
        break;
    case REVERSED:
        for (i = 0; i < n; i++) {
            t[i].flags ^= cpu_to_le16(W);
        }
        break;
    case ZERO_LEN:
        i = 1 + rnd(f, n - 2);
        t[i].len = 0;
        break;
    case OUTSIDE_RAM:
    case IN_MMIO:
        for (i = 1; i < n - 1; i++) {
            uint64_t a = le64_to_cpu(t[i].addr) - ch->data;

            a += ch->kind == IN_MMIO ? 0xfebf0000 : 16 * GiB;
            t[i].addr = cpu_to_le64(a);
        }
        break;
    case GARBAGE:
        write_hdr_at(f, junk_hdr_addr(f, c), ch->type, sector);
        n = 1 + rnd(f, 6);
        for (i = 0; i < n; i++) {
            static const uint16_t flag_sets[] = {
                0, N, W, W | N, I, I | N, I | W, N, W | N,
            };
            /*
             * Within the chain or off the table: never into another
             * chain, whose buffers the junk could then overwrite.  In the
             * ring's table, the entry after a direct chain's last one is
             * the next chain's head: only an indirect table ends there.
             */
            uint16_t next = rnd(f, 4) && (i + 1 < n || indirect) ?
                            base + i + 1 :
                            rnd(f, 2) ? base + rnd(f, n) :
                            f->qsize + rnd(f, 0x10000 - f->qsize);

            t[i] = vblk_desc(rnd(f, 2) ? junk_addr(f) : junk_hdr_addr(f, c),
                        junk_len(f), flag_sets[rnd(f, ARRAY_SIZE(flag_sets))],
                        next);
            if (le16_to_cpu(t[i].flags) & I) {
                t[i].addr = cpu_to_le64(rnd(f, 2) ? junk_addr(f) :
                                        junk_table_addr(f, c));
            }
        }
        if (!rnd(f, 2)) {
            write_hdr_at(f, junk_hdr_addr(f, c),
                         rnd(f, 2) ? rnd(f, 20) : g_rand_int(f->rand),
                         rnd(f, 2) ? junk_sector(f) :
                         (uint64_t)g_rand_int(f->rand) << 32);
        }
        /* The table may hold the junk as well */
        qtest_memwrite(d->qts, junk_table_addr(f, c), t, n * sizeof(t[0]));
        break;
    default:
        break;
    }

    if (!indirect) {
        memcpy(&tab[*used], t, n * sizeof(t[0]));
        assert_own_entries(f, tab, *used, n);
        ch->head = *used;
        *used += n;
        return;
    }

    /* Indirect tables: numbered from 0 (base is 0) */
    if (ch->kind == IND_NESTED) {
        /* Not followed: QEMU takes it for a data buffer */
        t[1 + rnd(f, n - 2)].flags |= cpu_to_le16(I);
    }
    qtest_memwrite(d->qts, table_addr(f, c), t, n * sizeof(t[0]));
    switch (ch->kind) {
    case IND_ZERO:
        tab[*used] = vblk_desc(table_addr(f, c), 0, I, 0);
        break;
    case IND_ODD:
        tab[*used] = vblk_desc(table_addr(f, c), n * 16 - 1 - rnd(f, 15), I, 0);
        break;
    case IND_FAR:
        tab[*used] = vblk_desc(16 * GiB, n * 16, I, 0);
        break;
    default:
        tab[*used] = vblk_desc(table_addr(f, c), n * 16, I, 0);
    }
    ch->head = *used;
    *used += 1;
}

static Kind pick_kind(Fuzz *f)
{
    /* Seven in eight chains are valid: about half the batches complete */
    if (rnd(f, 8)) {
        return VALID;
    }
    return 1 + rnd(f, KIND_MAX - 1);
}

/* Put a valid request's data in place: a pattern to write, poison to read */
static void prepare_valid(Fuzz *f, Chain *ch)
{
    VblkSeg seg = { ch->data, ch->len };
    VblkIo io = { .offset = ch->offset, .segs = &seg, .nsegs = 1 };
    g_autofree uint8_t *buf = NULL;

    if (ch->type == VIRTIO_BLK_T_IN) {
        vblk_poison(f->d, &io);
        return;
    }
    buf = g_malloc(ch->len);
    vblk_pattern(buf, ch->len, ch->offset, f->gen);
    qtest_memwrite(f->d->qts, ch->data, buf, ch->len);
    /* Until it completes, nobody knows what the disk holds there */
    memset(f->known + ch->offset / 512, 0, ch->len / 512);
}

static void check_valid(Fuzz *f, Chain *ch, uint8_t status)
{
    VblkDev *d = f->d;
    g_autofree uint8_t *buf = g_malloc(ch->len);
    uint32_t i;

    if (status != VIRTIO_BLK_S_OK) {
        g_error("valid %s of %u bytes at %" PRIu64 ": status %d",
                ch->type == VIRTIO_BLK_T_IN ? "read" : "write", ch->len,
                ch->offset, status);
    }
    if (ch->type == VIRTIO_BLK_T_OUT) {
        g_assert_cmpuint(ch->used_len, ==, 1);
        vblk_pattern(d->shadow + ch->offset, ch->len, ch->offset, f->gen);
        memset(f->known + ch->offset / 512, 1, ch->len / 512);
        return;
    }
    g_assert_cmpuint(ch->used_len, ==, ch->len + 1);
    qtest_memread(d->qts, ch->data, buf, ch->len);
    for (i = 0; i < ch->len; i++) {
        uint64_t pos = ch->offset + i;

        if (f->known[pos / 512] && buf[i] != d->shadow[pos]) {
            g_error("batch %u: read at disk offset %" PRIu64 ": 0x%02x, "
                    "expected 0x%02x", f->batches, pos, buf[i],
                    d->shadow[pos]);
        }
    }
}

/* The device serves a plain write and read after a reset */
static void still_works(Fuzz *f)
{
    VblkSeg seg = { f->data, 4096 };
    uint64_t offset = rnd(f, VALID_SIZE / 4096) * 4096;

    vblk_write_pattern(f->d, 0, offset, &seg, 1, ++f->gen);
    memset(f->known + offset / 512, 1, 4096 / 512);
    vblk_read_verify(f->d, 0, offset, &seg, 1);
}

static void batch(Fuzz *f, unsigned nchains)
{
    VblkDev *d = f->d;
    g_autofree struct vring_desc *tab = g_new(struct vring_desc, f->qsize);
    Chain chains[MAX_CHAINS] = { 0 };
    uint16_t heads[MAX_CHAINS];
    struct vring_used_elem used[MAX_CHAINS];
    int regions[VALID_SIZE / REGION];
    unsigned ndesc = 0, i, j, got, nregions = 0;
    bool reset, breaks = false, garbage = false;

    /* Valid requests of one batch never share a disk range */
    for (i = 0; i < ARRAY_SIZE(regions); i++) {
        regions[i] = i;
    }
    for (i = ARRAY_SIZE(regions) - 1; i > 0; i--) {
        int tmp = regions[i];

        j = rnd(f, i + 1);
        regions[i] = regions[j];
        regions[j] = tmp;
    }
    /* Unused descriptors lead nowhere */
    for (i = 0; i < f->qsize; i++) {
        tab[i] = vblk_desc(f->scratch, 512, W, 0);
    }

    f->gen++;
    for (i = 0; i < nchains; i++) {
        Chain *ch = &chains[i];

        ch->kind = pick_kind(f);
        if (ch->kind == VALID) {
            uint64_t region = regions[nregions++] * REGION;

            ch->offset = region;
        }
        build(f, i, ch, tab, &ndesc);
        if (ch->kind == VALID) {
            /* at a random place inside its region */
            ch->offset += rnd(f, (REGION - ch->len) / 512 + 1) * 512;
            write_hdr(f, i, ch->type, ch->offset / VBLK_SECTOR);
            prepare_valid(f, ch);
        }
        heads[i] = ch->head;
        breaks |= kind_breaks(ch->kind);
        garbage |= ch->kind == GARBAGE;
        f->per_kind[ch->kind]++;
    }
    g_assert_cmpuint(ndesc, <=, f->qsize);

    got = vblk_raw_batch(d, 0, tab, f->qsize, heads, nchains, used, &reset);
    g_assert_true(qtest_probe_child(d->qts));

    for (i = 0; i < got; i++) {
        for (j = 0; j < nchains; j++) {
            if (chains[j].head == used[i].id) {
                break;
            }
        }
        g_assert_cmpuint(j, <, nchains);       /* a head we made available */
        g_assert_false(chains[j].used);        /* used once */
        chains[j].used = true;
        chains[j].used_len = used[i].len;
    }
    f->completed += got;

    /* A chain that breaks the rules breaks the device; nothing else does */
    if (breaks) {
        g_assert_true(reset);
    } else if (!garbage && reset) {
        GString *kinds = g_string_new("");

        for (i = 0; i < nchains; i++) {
            g_string_append_printf(kinds, " %s%s", kind_names[chains[i].kind],
                                   chains[i].used ? "(used)" : "");
        }
        g_error("batch %u: NEEDS_RESET, for chains:%s", f->batches,
                kinds->str);
    } else if (!garbage) {
        g_assert_cmpuint(got, ==, nchains);
    }

    for (i = 0; i < nchains; i++) {
        Chain *ch = &chains[i];
        uint8_t status;

        if (!ch->used) {
            continue;
        }
        if (kind_breaks(ch->kind)) {
            g_error("batch %u: a %s chain completed", f->batches,
                    kind_names[ch->kind]);
        }
        if (ch->kind == GARBAGE) {
            continue;
        }
        status = qtest_readb(d->qts, status_addr(f, i));
        switch (ch->kind) {
        case VALID:
            check_valid(f, ch, status);
            break;
        case PAST_END:
        case OVERFLOW:
            g_assert_cmpint(status, ==, VIRTIO_BLK_S_IOERR);
            break;
        case UNSUPPORTED:
            g_assert_cmpint(status, ==, VIRTIO_BLK_S_UNSUPP);
            break;
        case IND_NESTED:
            g_assert_cmpint(status, ==, VIRTIO_BLK_S_OK);
            break;
        default:
            g_assert_not_reached();
        }
    }

    f->batches++;
    f->chains += nchains;
    if (reset || (vblk_device_status(d) & VIRTIO_CONFIG_S_NEEDS_RESET)) {
        f->resets++;
        vblk_reset(d);
        still_works(f);
    }
}

static void fuzz(const char *drive_opts)
{
    const char *env_seed = g_getenv("VBLK_FUZZ_SEED");
    const char *env_chains = g_getenv("VBLK_FUZZ_CHAINS");
    uint64_t seed = DEFAULT_SEED, total = DEFAULT_CHAINS;
    char *image = vblk_make_image(DISK_SIZE);
    g_autofree uint8_t *known = g_malloc0(DISK_SIZE / 512);
    gint64 t0 = g_get_monotonic_time();
    Fuzz f = { 0 };
    VblkSeg seg;
    uint64_t off;
    int k;

    if (env_seed) {
        g_assert_cmpint(qemu_strtou64(env_seed, NULL, 0, &seed), ==, 0);
    }
    if (env_chains) {
        g_assert_cmpint(qemu_strtou64(env_chains, NULL, 0, &total), ==, 0);
    }
    g_test_message("seed %" PRIu64 " (VBLK_FUZZ_SEED), %" PRIu64
                   " chains (VBLK_FUZZ_CHAINS)", seed, total);

    f.d = vblk_start(256 * MiB, image, 1,
                     "-machine pc -m 256M -object iothread,id=io0 "
                     "-blockdev file,node-name=disk0,filename=%s,%s "
                     "-device virtio-blk-pci,id=vblk0,addr=04.0,drive=disk0,"
                     "iothread=io0", image, drive_opts);
    f.rand = g_rand_new_with_seed(seed);
    f.qsize = f.d->vqs[0]->size;
    f.known = known;
    f.hdrs = f.d->data_start;
    f.tables = f.d->data_start + 64 * KiB;
    f.data = f.d->data_start + MiB;
    f.scratch = f.d->data_start + 8 * MiB;
    memset(f.known, 1, DISK_SIZE / 512);    /* all zeroes, as the shadow */

    while (f.chains < total) {
        batch(&f, 1 + rnd(&f, MIN(MAX_CHAINS, total - f.chains)));
    }

    g_test_message("%u chains in %u batches, %u completed, %u resets, "
                   "%.1f s", f.chains, f.batches, f.completed, f.resets,
                   (g_get_monotonic_time() - t0) / 1e6);
    for (k = 0; k < KIND_MAX; k++) {
        g_test_message("  %-22s %u", kind_names[k], f.per_kind[k]);
    }
    /* Every kind of chain was tried, and the device broke and recovered */
    for (k = 0; k < KIND_MAX && total >= 1000; k++) {
        g_assert_cmpuint(f.per_kind[k], >, 0);
    }
    g_assert_cmpuint(f.resets, >, 0);
    g_assert_cmpuint(f.completed, >, 0);

    /* Finally every byte: write the whole disk, read it back */
    vblk_reset(f.d);
    for (off = 0; off < DISK_SIZE; off += MiB) {
        seg = (VblkSeg) { f.data, MiB };
        vblk_write_pattern(f.d, 0, off, &seg, 1, ++f.gen);
        seg.gpa = f.data + 2 * MiB;
        vblk_read_verify(f.d, 0, off, &seg, 1);
    }
    g_rand_free(f.rand);
    vblk_stop(f.d);
}

static void test_fuzz(gconstpointer opaque)
{
    fuzz(opaque);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    qtest_add_data_func("/virtio-blk-fuzz/split/threads", "aio=threads",
                        test_fuzz);
    qtest_add_data_func("/virtio-blk-fuzz/split/io_uring-fixed",
                        "aio=io_uring,cache.direct=on,aio-fixed-buffers=on",
                        test_fuzz);
    return g_test_run();
}
