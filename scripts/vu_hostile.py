#!/usr/bin/env python3
"""A hostile vhost-user frontend against qemu-storage-daemon's
vhost-user-blk export.

The daemon runs two exports of one image, "victim" and "bystander".
Each case connects to the victim as a frontend would (memory shared
from a memfd, one split virtqueue), sends what a compromised or buggy
VMM could send, and then checks that the export stopped the device and
dropped that frontend, that the daemon is still up and answers QMP, and
that a well-formed frontend reads back on the bystander, and on the
victim once reconnected, the data written there.
Prints one "PASS:"/"FAIL:" line a check.
"""

import argparse
import mmap
import os
import re
import socket
import struct
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from qmp import QMP  # noqa: E402

# vhost-user requests (docs/interop/vhost-user.rst)
GET_FEATURES, SET_FEATURES, SET_OWNER = 1, 2, 3
SET_MEM_TABLE = 5
SET_VRING_NUM, SET_VRING_ADDR, SET_VRING_BASE, GET_VRING_BASE = 8, 9, 10, 11
SET_VRING_KICK, SET_VRING_CALL = 12, 13
GET_PROTOCOL_FEATURES, SET_PROTOCOL_FEATURES = 15, 16
GET_QUEUE_NUM = 17
SET_BACKEND_REQ_FD = 21
BACKEND_CONFIG_CHANGE_MSG = 2     # back-end to front-end
POSTCOPY_ADVISE, POSTCOPY_END = 28, 30
GET_INFLIGHT_FD, SET_INFLIGHT_FD = 31, 32
ADD_MEM_REG, REM_MEM_REG = 37, 38
VERSION, REPLY, NEED_REPLY = 0x1, 0x4, 0x8

VIRTIO_F_VERSION_1 = 1 << 32
VIRTIO_RING_F_EVENT_IDX = 1 << 29
PROTOCOL_F_BACKEND_REQ, PROTOCOL_F_CONFIG = 1 << 5, 1 << 9
PROTOCOL_F_INFLIGHT_SHMFD = 1 << 12
PROTOCOL_F_CONFIGURE_MEM_SLOTS = 1 << 15
PROTOCOL_F_PINNED_MEMORY = 1 << 20
DESC_F_NEXT, DESC_F_WRITE, DESC_F_INDIRECT = 1, 2, 4
BLK_T_IN, BLK_T_OUT, BLK_T_GET_ID = 0, 1, 8
BLK_S_OK = 0

MEM = 4 << 20           # the frontend's memory
QVA = 0x7f1200000000    # where the frontend claims to have it mapped
# Layout of that memory
DESC, AVAIL, USED = 0x0, 0x10000, 0x20000
HDR, DATA, STATUS, TABLE = 0x30000, 0x100000, 0x40000, 0x50000


def store_idx(mem, off, idx):
    """Store the 16-bit ring index at @off of @mem in one store, as a
    driver must publish it.  struct.pack_into() zeroes the bytes it packs
    before it writes them, so the device could read an index of 0 in
    between, take the ring as far ahead and pop entries that were never
    made available."""
    with memoryview(mem) as m, m[off:off + 2] as b, b.cast("H") as h:
        h[0] = idx & 0xffff


class Frontend:
    """A minimal vhost-user frontend: one queue, requests by hand."""

    def __init__(self, path, num=64, pin=True):
        self.pin = pin      # accept VHOST_USER_PROTOCOL_F_PINNED_MEMORY
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(10)
        self.sock.connect(path)
        self.num = num
        self.fd = os.memfd_create("vu-hostile")
        os.ftruncate(self.fd, MEM)
        self.mem = mmap.mmap(self.fd, MEM)
        self.avail_idx = 0
        self.used_seen = 0
        self.inflight = None    # (fd, mmap_size), with in-flight tracking

    def close(self):
        self.sock.close()
        self.mem.close()
        os.close(self.fd)
        if self.inflight:
            os.close(self.inflight[0])

    def send(self, req, payload=b"", fds=(), flags=VERSION):
        hdr = struct.pack("<III", req, flags, len(payload))
        if fds:
            socket.send_fds(self.sock, [hdr + payload], list(fds))
        else:
            self.sock.sendall(hdr + payload)

    def recv_u64(self, req):
        data = b""
        while len(data) < 20:
            chunk = self.sock.recv(20 - len(data))
            if not chunk:
                raise EOFError("the daemon closed the connection")
            data += chunk
        r, _, size, value = struct.unpack("<IIIQ", data)
        assert r == req and size == 8, (r, size)
        return value

    def alive(self):
        """Whether the daemon still serves this connection."""
        try:
            self.send(GET_FEATURES)
            self.recv_u64(GET_FEATURES)
            return True
        except (OSError, EOFError):
            return False

    # --- set-up as QEMU does it ------------------------------------------

    def mem_table(self, size=MEM, offset=0, req=SET_MEM_TABLE):
        region = struct.pack("<QQQQ", 0, size, QVA, offset)
        if req == SET_MEM_TABLE:
            self.send(req, struct.pack("<II", 1, 0) + region, [self.fd])
        else:
            self.send(req, struct.pack("<II", 0, 0) + region, [self.fd])

    def vring_num(self, index, num):
        self.send(SET_VRING_NUM, struct.pack("<II", index, num))

    def vring_base(self, index, base):
        self.send(SET_VRING_BASE, struct.pack("<II", index, base))

    def vring_addr(self, index, desc=DESC, avail=AVAIL, used=USED):
        self.send(SET_VRING_ADDR, struct.pack(
            "<IIQQQQ", index, 0, QVA + desc, QVA + used, QVA + avail, 0))

    def vring_fd(self, req, index):
        efd = os.eventfd(0, os.EFD_NONBLOCK)
        self.send(req, struct.pack("<Q", index), [efd])
        return efd

    def reconnect(self, path):
        """A new connection with the same memory (and in-flight table)"""
        self.sock.close()
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(10)
        self.sock.connect(path)

    def inflight_fd(self, num):
        """GET_INFLIGHT_FD once, then SET_INFLIGHT_FD, as QEMU does"""
        if self.inflight is None:
            self.send(GET_INFLIGHT_FD, struct.pack("<QQHH4x", 0, 0, 1, num))
            data, fds, _, _ = socket.recv_fds(self.sock, 12 + 24, 1)
            while len(data) < 12 + 24:
                chunk = self.sock.recv(12 + 24 - len(data))
                if not chunk:
                    raise EOFError("the daemon closed the connection")
                data += chunk
            size = struct.unpack_from("<Q", data, 12)[0]
            if len(fds) != 1 or not size:
                raise AssertionError("no in-flight table from the daemon")
            self.inflight = (fds[0], size)
        fd, size = self.inflight
        self.send(SET_INFLIGHT_FD, struct.pack("<QQHH4x", size, 0, 1, num),
                  [fd])

    def setup(self, num=None, skip=(), ring=(DESC, AVAIL, USED),
              inflight=False, base=0, after_mem=None, features=0,
              protocol=0):
        num = self.num if num is None else num
        self.send(GET_FEATURES)
        self.recv_u64(GET_FEATURES)
        self.send(SET_FEATURES, struct.pack("<Q", VIRTIO_F_VERSION_1 |
                                            features))
        self.send(GET_PROTOCOL_FEATURES)
        self.protocol_features = self.recv_u64(GET_PROTOCOL_FEATURES)
        want = (PROTOCOL_F_PINNED_MEMORY if self.pin else 0) | \
            (PROTOCOL_F_INFLIGHT_SHMFD if inflight else 0) | protocol
        self.send(SET_PROTOCOL_FEATURES, struct.pack(
            "<Q", self.protocol_features & want))
        self.send(SET_OWNER)
        if inflight:
            if not self.protocol_features & PROTOCOL_F_INFLIGHT_SHMFD:
                raise AssertionError("the export does not offer "
                                     "VHOST_USER_PROTOCOL_F_INFLIGHT_SHMFD")
            self.inflight_fd(num)
        if "mem" not in skip:
            self.mem_table()
            if after_mem:
                after_mem()
        self.vring_call = self.vring_fd(SET_VRING_CALL, 0)
        self.vring_num(0, num)
        self.vring_base(0, base)
        if "addr" not in skip:
            self.vring_addr(0, *ring)
        self.kick_fd = self.vring_fd(SET_VRING_KICK, 0)

    # --- requests -----------------------------------------------------------

    def put_desc(self, i, addr, length, flags, nxt=0, table=DESC):
        struct.pack_into("<QIHH", self.mem, table + 16 * i, QVA_GPA(addr),
                         length, flags, nxt)

    def submit(self, head):
        struct.pack_into("<H", self.mem, AVAIL + 4 + 2 * (self.avail_idx %
                                                          self.num), head)
        self.avail_idx += 1
        store_idx(self.mem, AVAIL + 2, self.avail_idx)
        os.eventfd_write(self.kick_fd, 1)

    def wait_used(self, timeout=10):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            idx = struct.unpack_from("<H", self.mem, USED + 2)[0]
            if idx != self.used_seen & 0xffff:
                self.used_seen += 1
                return True
            time.sleep(0.005)
        return False

    def start(self, write, sector, data_len, fill=None, slot=0,
              stride=65536):
        """Submit one request in three descriptors, without waiting; each
        slot has its own descriptors, header, data (@stride bytes apart)
        and status byte"""
        hdr, data, status = HDR + 16 * slot, DATA + stride * slot, \
            STATUS + slot
        struct.pack_into("<IIQ", self.mem, hdr, BLK_T_OUT if write
                         else BLK_T_IN, 0, sector)
        if fill is not None:
            self.mem[data:data + data_len] = fill
        self.mem[status] = 0xff
        self.put_desc(3 * slot, hdr, 16, DESC_F_NEXT, 3 * slot + 1)
        self.put_desc(3 * slot + 1, data, data_len,
                      DESC_F_NEXT | (0 if write else DESC_F_WRITE),
                      3 * slot + 2)
        self.put_desc(3 * slot + 2, status, 1, DESC_F_WRITE)
        self.submit(3 * slot)

    def used_idx(self):
        return struct.unpack_from("<H", self.mem, USED + 2)[0]

    def rw(self, write, sector, data_len, fill=None):
        """One request; its status byte, or None"""
        self.start(write, sector, data_len, fill)
        if self.wait_used():
            return self.mem[STATUS]
        # Tell a lost kick from a request that never ends
        os.eventfd_write(self.kick_fd, 1)
        if self.wait_used(2):
            raise AssertionError("the request ran only when kicked again")
        return None


def QVA_GPA(addr):
    """Descriptors carry guest physical addresses: region 0 is at GPA 0"""
    return addr


def new_memory(f, copy=True):
    """Give @f a new memfd with (a copy of) the old memory, and send it"""
    fd = os.memfd_create("vu-hostile")
    os.ftruncate(fd, MEM)
    mem = mmap.mmap(fd, MEM)
    if copy:
        mem[:] = f.mem[:]
    old = (f.fd, f.mem)
    f.fd, f.mem = fd, mem
    f.mem_table()
    return old


def remap_round(path, seed):
    """A frontend moves its memory to a new memfd between requests, and
    once with a request in flight (the same memfd sent again): what it
    reads must land in the new memory, and the old must not change.  A
    registration left over from the old mapping, at the same address,
    would read and write the old pages."""
    f = Frontend(path)
    old = None
    try:
        f.setup()
        a, b = pattern(seed, 65536), pattern(seed + 1, 65536)
        if f.rw(True, 8 * seed, len(a), a) != BLK_S_OK:
            return "first write failed"
        old = new_memory(f)
        marker = bytes([0x5a]) * len(b)
        old[1][DATA:DATA + len(b)] = marker
        if f.rw(True, 8 * seed + 128, len(b), b) != BLK_S_OK:
            return "write from the new memory failed"
        f.mem[DATA:DATA + len(a)] = bytes(len(a))
        if f.rw(False, 8 * seed, len(a)) != BLK_S_OK:
            return "read into the new memory failed"
        if f.mem[DATA:DATA + len(a)] != a:
            return "the read did not land in the new memory"
        if old[1][DATA:DATA + len(b)] != marker:
            return "the old memory was written"
        # A request in flight when the same memory comes again
        struct.pack_into("<IIQ", f.mem, HDR, BLK_T_IN, 0, 8 * seed + 128)
        f.mem[STATUS] = 0xff
        f.put_desc(0, HDR, 16, DESC_F_NEXT, 1)
        f.put_desc(1, DATA, len(b), DESC_F_NEXT | DESC_F_WRITE, 2)
        f.put_desc(2, STATUS, 1, DESC_F_WRITE)
        f.submit(0)
        f.mem_table()
        if not f.wait_used() or f.mem[STATUS] != BLK_S_OK:
            return "the request in flight did not complete"
        if f.mem[DATA:DATA + len(b)] != b:
            return "the request in flight read other data"
        return None if f.alive() else "the daemon dropped the frontend"
    except (OSError, EOFError, AssertionError) as e:
        return f"{type(e).__name__}: {e}"
    finally:
        if old:
            old[1].close()
            os.close(old[0])
        f.close()


def registered(q, want, timeout=15):
    """Wait until the daemon holds @want bytes registered; what it holds"""
    deadline = time.monotonic() + timeout
    while True:
        reg = q.cmd("x-query-io-uring-buffers")["registered-bytes"]
        if reg == want or time.monotonic() > deadline:
            return reg
        time.sleep(0.05)


def pinning_contract(q, path):
    """Registration follows VHOST_USER_PROTOCOL_F_PINNED_MEMORY: the
    export pins the memory of a frontend that accepted it, nothing of one
    that did not, and nothing between POSTCOPY_ADVISE and POSTCOPY_END
    (the incoming side of a postcopy migration discards guest memory).
    A list of (ok, what)."""
    results = []
    f = Frontend(path, pin=False)
    try:
        f.setup()
        offered = bool(f.protocol_features & PROTOCOL_F_PINNED_MEMORY)
        results.append((offered, "the export offers "
                        "VHOST_USER_PROTOCOL_F_PINNED_MEMORY over a node "
                        "with fixed buffers"))
        data = pattern(7, 4096)
        ok = f.rw(True, 4096, len(data), data) == BLK_S_OK
        reg = registered(q, 0, 1)
        results.append((ok and reg == 0, "a frontend that did not accept "
                        "pinning is served, and none of its memory is "
                        f"registered ({reg >> 10} KiB)"))
    except (OSError, EOFError, AssertionError) as e:
        results.append((False, f"unpinned frontend: {type(e).__name__}: {e}"))
    finally:
        f.close()
    f = Frontend(path)
    try:
        f.setup()
        data = pattern(8, 4096)
        ok = f.rw(True, 4096, len(data), data) == BLK_S_OK
        reg = registered(q, MEM)
        results.append((ok and reg == MEM, "the memory of a frontend that "
                        f"accepted pinning is registered ({reg >> 10} KiB)"))
        f.send(POSTCOPY_ADVISE)
        _, fds, _, _ = socket.recv_fds(f.sock, 12, 1)
        for fd in fds:
            os.close(fd)
        ok = f.rw(False, 4096, len(data)) == BLK_S_OK and \
            f.mem[DATA:DATA + len(data)] == data
        reg = registered(q, 0)
        results.append((ok and reg == 0, "after POSTCOPY_ADVISE nothing is "
                        f"registered ({reg >> 10} KiB) and reads go on"))
        f.mem_table()
        f.rw(False, 4096, len(data))
        reg = registered(q, 0, 1)
        results.append((reg == 0, "a memory table during postcopy is not "
                        f"registered ({reg >> 10} KiB)"))
        f.send(POSTCOPY_END, flags=VERSION | NEED_REPLY)
        f.recv_u64(POSTCOPY_END)
        reg = registered(q, MEM)
        results.append((reg == MEM and f.alive(), "after POSTCOPY_END the "
                        f"memory is registered again ({reg >> 10} KiB)"))
    except (OSError, EOFError, AssertionError) as e:
        results.append((False, f"postcopy: {type(e).__name__}: {e}"))
    finally:
        f.close()
    reg = registered(q, 0)
    results.append((reg == 0, "the daemon released the memory when the "
                    f"frontend left ({reg >> 10} KiB)"))
    return results


def pattern(seed, n):
    return bytes((seed * 131 + i * 7) & 0xff for i in range(n))


# --- hostile cases ----------------------------------------------------------
# Each sends something bad on a connection that is set up as far as the
# case needs; the daemon may drop the connection, never itself.

def bad_index(msg):
    def case(f):
        f.setup(skip=("addr",))
        if msg == SET_VRING_NUM:
            f.vring_num(100000, 64)
        elif msg == SET_VRING_BASE:
            f.vring_base(100000, 1)
        elif msg == GET_VRING_BASE:
            f.send(GET_VRING_BASE, struct.pack("<II", 100000, 0))
            f.recv_u64(GET_VRING_BASE)
        else:
            f.vring_addr(100000)
    return case


def ring_size_zero(f):
    f.setup(num=0)
    f.submit(0)


def ring_size_huge(f):
    f.setup(num=1 << 30)
    f.submit(0)


def ring_past_memory(f):
    # the descriptor table starts inside the memory and ends past it
    f.setup(skip=("addr",), num=1024)
    f.vring_addr(0, desc=MEM - 16)
    f.submit(0)


def ring_size_odd(f):
    # a split ring's size is a power of 2 (virtio 2.7): a device that
    # takes 100 serves this read
    f.setup(num=100)
    f.rw(False, 0, 4096)


def event_idx_past_memory(f):
    # the used ring fits, its avail_event field (VIRTIO_RING_F_EVENT_IDX)
    # does not: the device writes it at every pop
    used = MEM - (4 + 8 * f.num)
    f.setup(ring=(DESC, AVAIL, used), features=VIRTIO_RING_F_EVENT_IDX)
    f.submit(0)


def num_after_addr(f):
    # a ring that fits, then made larger than the memory holds
    f.setup()
    f.vring_num(0, 32768)
    f.vring_addr(0, desc=MEM - 64 * 16)
    f.submit(0)


def region_past_file(f):
    # the memory table claims more than the memfd holds: touching it
    # would be SIGBUS
    f.send(GET_FEATURES)
    f.recv_u64(GET_FEATURES)
    f.send(SET_FEATURES, struct.pack("<Q", VIRTIO_F_VERSION_1))
    f.send(SET_OWNER)
    f.mem_table(size=64 << 20)
    f.vring_call = f.vring_fd(SET_VRING_CALL, 0)
    f.vring_num(0, 64)
    f.vring_base(0, 0)
    f.vring_addr(0, desc=MEM + (1 << 20))
    f.kick_fd = f.vring_fd(SET_VRING_KICK, 0)
    f.submit(0)


def desc_outside_memory(f):
    f.setup()
    struct.pack_into("<IIQ", f.mem, HDR, BLK_T_IN, 0, 0)
    f.put_desc(0, HDR, 16, DESC_F_NEXT, 1)
    f.put_desc(1, MEM + 4096, 4096, DESC_F_NEXT | DESC_F_WRITE, 2)
    f.put_desc(2, STATUS, 1, DESC_F_WRITE)
    f.submit(0)
    f.wait_used(1)


def desc_loop(f):
    f.setup()
    f.put_desc(0, HDR, 16, DESC_F_NEXT, 0)
    f.submit(0)
    f.wait_used(1)


def short_header(f):
    f.setup()
    f.put_desc(0, HDR, 8, DESC_F_NEXT, 1)
    f.put_desc(1, STATUS, 1, DESC_F_WRITE)
    f.submit(0)
    f.wait_used(1)


def indirect_past_memory(f):
    f.setup()
    f.put_desc(0, MEM - 32, 4096, DESC_F_INDIRECT)
    f.submit(0)
    f.wait_used(1)


def head_out_of_range(f):
    f.setup()
    struct.pack_into("<H", f.mem, AVAIL + 4, 60000)
    store_idx(f.mem, AVAIL + 2, 1)
    os.eventfd_write(f.kick_fd, 1)
    f.wait_used(1)


def fresh_rw(path, write, sector, data_len, fill=None):
    """One request from a new frontend on @path: (None, the data of its
    buffer after the request), or (what went wrong, None)"""
    f = Frontend(path)
    try:
        f.setup()
        status = f.rw(write, sector, data_len, fill)
        if status != BLK_S_OK:
            return f"status {status}", None
        return None, bytes(f.mem[DATA:DATA + data_len])
    except (OSError, EOFError, AssertionError) as e:
        return f"{type(e).__name__}: {e}", None
    finally:
        f.close()


def avail_past_ring(path):
    """The driver moves the avail index further past the device's than
    the ring has entries, as a torn or hostile write of it would: the ring
    cannot hold that many, so none of them is real.  The device must stop
    at once, without serving the stale entries (before: it wrote the 64
    of them to the disk, then stopped with 'Virtqueue size exceeded').
    The used index shows nothing either way (a stopped device pushes
    nothing): the sector read back is the check.  Then a new
    frontend reads back what was on the disk before.  An error, or None."""
    before = pattern(78, 512)
    err, _ = fresh_rw(path, True, 8, len(before), before)
    if err:
        return f"the first write: {err}"
    f = Frontend(path)
    try:
        f.setup()
        f.mem[DATA:DATA + 512] = pattern(79, 512)
        struct.pack_into("<IIQ", f.mem, HDR, BLK_T_OUT, 0, 8)
        f.put_desc(0, HDR, 16, DESC_F_NEXT, 1)
        f.put_desc(1, DATA, 512, DESC_F_NEXT, 2)
        f.put_desc(2, STATUS, 1, DESC_F_WRITE)
        for i in range(f.num):
            struct.pack_into("<H", f.mem, AVAIL + 4 + 2 * i, 0)
        store_idx(f.mem, AVAIL + 2, f.num + 1)
        os.eventfd_write(f.kick_fd, 1)
        time.sleep(0.5)
        served = f.used_idx()
        if served:
            return f"the device served {served} of the ring's stale entries"
        if f.alive():
            return "the device did not stop"
    except (OSError, EOFError, AssertionError) as e:
        return f"{type(e).__name__}: {e}"
    finally:
        f.close()
    # Served once the connection has ended, its requests with it
    err, data = fresh_rw(path, False, 8, len(before))
    if err:
        return f"the read back: {err}"
    if data != before:
        return "the device wrote a stale entry's data to the disk"
    return None


# The device model's broken chains (tests/qtest/virtio-blk-hostile-test.c,
# split-chains) where vhost-user has them; each one must stop the device.
FAR = 16 << 30      # no memory there


def chain(descs, table=()):
    """A case that submits @descs (addr, len, flags, next) at head 0, with
    @table written at TABLE"""
    def case(f):
        f.setup()
        struct.pack_into("<IIQ", f.mem, HDR, BLK_T_IN, 0, 0)
        for i, d in enumerate(table):
            f.put_desc(i, *d, table=TABLE)
        for i, d in enumerate(descs):
            f.put_desc(i, *d)
        f.submit(0)
        f.wait_used(1)
    return case


def long_table(n):
    """@n entries chained: header, data buffers, status"""
    return [(HDR, 16, DESC_F_NEXT, 1)] + \
        [(DATA + 512 * i, 512, DESC_F_WRITE | DESC_F_NEXT, i + 2)
         for i in range(n - 2)] + [(STATUS, 1, DESC_F_WRITE, 0)]


N, W, IND = DESC_F_NEXT, DESC_F_WRITE, DESC_F_INDIRECT
CHAINS = {
    "next-beyond-queue": chain([(HDR, 16, N, 1), (DATA, 512, W | N, 1000)]),
    "indirect-length-0": chain([(TABLE, 0, IND, 0)]),
    "indirect-length-odd": chain([(TABLE, 24, IND, 0)]),
    "indirect-nested": chain([(TABLE, 16, IND, 0)],
                             [(TABLE + 64, 48, IND, 0)]),
    "no-status-byte": chain([(HDR, 16, 0, 0)]),
    "writable-first": chain([(HDR, 16, W | N, 1), (DATA, 512, N, 2),
                             (STATUS, 1, 0, 0)]),
    "indirect-outside-memory": chain([(FAR, 48, IND, 0)]),
    "indirect-4-gib": chain([(TABLE, 0xfffffff0, IND, 0)]),
    "indirect-longer-than-1024": chain([(TABLE, 1100 * 16, IND, 0)],
                                       long_table(1100)),
    "header-status-outside-memory": chain([(FAR, 16, N, 1),
                                           (FAR + 4096, 1, W, 0)]),
}


CASES = {
    "vring-num-index": bad_index(SET_VRING_NUM),
    "vring-base-index": bad_index(SET_VRING_BASE),
    "vring-addr-index": bad_index(SET_VRING_ADDR),
    "get-vring-base-index": bad_index(GET_VRING_BASE),
    "ring-size-zero": ring_size_zero,
    "ring-size-huge": ring_size_huge,
    "ring-past-memory": ring_past_memory,
    "ring-size-odd": ring_size_odd,
    "event-idx-past-memory": event_idx_past_memory,
    "ring-grown-past-memory": num_after_addr,
    "region-past-file": region_past_file,
    "desc-outside-memory": desc_outside_memory,
    "desc-loop": desc_loop,
    "short-header": short_header,
    "indirect-past-memory": indirect_past_memory,
    "head-out-of-range": head_out_of_range,
    **CHAINS,
}


# --- requests in flight when a ring stops or the frontend goes ------------
# On the "slow" export, behind a throttle: a first request primes the
# throttle's bucket, a second one then stays in flight for about 2 s.
SLOW_BPS = 32768


def start_slow_read(f):
    f.setup()
    if f.rw(True, 0, 65536, pattern(7, 65536)) != BLK_S_OK:
        raise AssertionError("the priming write failed")
    f.start(False, 0, 65536, slot=1)
    time.sleep(0.2)
    if f.used_idx() != 1:
        raise AssertionError("the throttled read was not in flight")


def stop_in_flight(path):
    """GET_VRING_BASE stops a ring: the device must complete the ring's
    requests first, and a device whose rings are all stopped must not
    write guest memory (docs/interop/vhost-user.rst, suspended state)."""
    f = Frontend(path)
    err = None
    try:
        start_slow_read(f)
        f.send(GET_VRING_BASE, struct.pack("<II", 0, 0))
        base = f.recv_u64(GET_VRING_BASE) >> 32
        used = f.used_idx()
        if base != 2:
            err = f"the ring's base is {base}, not 2"
        elif used != 2:
            err = ("the ring stopped with its request in flight (used "
                   "index 1 at the reply)")
        elif f.mem[STATUS + 1] != BLK_S_OK or \
                f.mem[DATA + 65536:DATA + 131072] != pattern(7, 65536):
            err = "the read completed with other data or status"
        time.sleep(2.5)
        if not err and f.used_idx() != used:
            err = "the device wrote guest memory after its ring stopped"
    except (OSError, EOFError, AssertionError) as e:
        err = f"{type(e).__name__}: {e}"
    finally:
        f.close()
    return err


def close_in_drain(q, path):
    """The frontend hangs up with a throttled read in flight, and a drain
    of the export's node begins while the connection's coroutine waits
    for that read: the drain lets it complete, and the coroutine ends the
    connection in the middle of the drain, removing its watches.  The
    daemon must stay up and serve the next frontend.  Before the watch
    was only forgotten while detached, upstream's detach had set the
    server's context to NULL, and removing the watch dereferenced it.
    An error, or None."""
    f = Frontend(path)
    try:
        start_slow_read(f)
    except (OSError, EOFError, AssertionError) as e:
        return f"the first frontend: {type(e).__name__}: {e}"
    finally:
        f.close()
    time.sleep(0.1)
    # The same size: a drain of the node, and no change for other cases
    try:
        q.cmd("block_resize", **{"node-name": "disk0", "size": 64 << 20})
    except (OSError, EOFError, RuntimeError) as e:
        return f"block_resize: {type(e).__name__}: {e}"
    err, _ = fresh_rw(path, False, 0, 4096)
    return f"the next frontend's read: {err}" if err else None


def messages_under_io(path, n=64, limit=0.1):
    """With @n requests in flight on the slow export (throttled, queues in
    two IOThreads), the messages that change nothing the queues use
    (GET_FEATURES, GET_PROTOCOL_FEATURES, GET_QUEUE_NUM) are answered at
    once: a frontend may send them under its big lock (GET_CONFIG after a
    resize).  Before, every message paused the queues and waited for
    every request in flight: seconds.  An error, or None."""
    f = Frontend(path, num=256)
    try:
        f.setup()
        if f.rw(True, 0, 65536, pattern(7, 65536)) != BLK_S_OK:
            return "the priming write failed"
        for slot in range(1, n + 1):
            f.start(False, 2 * slot, 1024, slot=slot, stride=1024)
        time.sleep(0.2)
        waiting = n + 1 - f.used_idx()
        if waiting < n // 2:
            return f"only {waiting} of {n} requests were in flight"
        for req in (GET_FEATURES, GET_PROTOCOL_FEATURES, GET_QUEUE_NUM):
            t0 = time.monotonic()
            f.send(req)
            f.recv_u64(req)
            took = time.monotonic() - t0
            if took > limit:
                return (f"request {req} took {took * 1000:.0f} ms with "
                        f"{waiting} requests in flight")
        deadline = time.monotonic() + 20
        while f.used_idx() != n + 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        if f.used_idx() != n + 1:
            return f"{f.used_idx() - 1} of {n} reads completed"
        if any(f.mem[STATUS + slot] != BLK_S_OK for slot in range(1, n + 1)):
            return "a read failed"
        return None if f.alive() else "the daemon dropped the frontend"
    except (OSError, EOFError, AssertionError) as e:
        return f"{type(e).__name__}: {e}"
    finally:
        f.close()


# --- the memory of long chains in flight ----------------------------------
# On the "long" export, behind a throttle of 2000 requests a second: a ring
# of 8192 requests whose chains have 1002 pieces each, all through one
# indirect table.  libvhost-user gives each an element of 16 KiB; the
# coroutine budget alone would let the export pop nearly all of them (130
# MiB); the memory bound of long chains (64 MiB an export) must stop it.
LONG_N, LONG_PIECES = 8192, 1000
LONG_DESC, LONG_AVAIL, LONG_USED = 0x100000, 0x140000, 0x150000
LONG_TABLE, LONG_HDR, LONG_DATA, LONG_STATUS = (0x180000, 0x190000,
                                                0x1a0000, 0x1b0000)
LONG_BOUND = 64 << 20


def submit_long_chains(f, setup=True):
    """Set @f up (unless told not to) and submit LONG_N requests of long
    chains at once"""
    if setup:
        f.setup(ring=(LONG_DESC, LONG_AVAIL, LONG_USED))
    struct.pack_into("<IIQ", f.mem, LONG_HDR, BLK_T_IN, 0, 0)
    f.mem[LONG_STATUS] = 0xff
    f.put_desc(0, LONG_HDR, 16, DESC_F_NEXT, 1, table=LONG_TABLE)
    # 999 pieces of one byte and one of 25: 1 KiB, two sectors
    for i in range(LONG_PIECES):
        f.put_desc(1 + i, LONG_DATA + i, 1 if i < LONG_PIECES - 1 else 25,
                   DESC_F_WRITE | DESC_F_NEXT, 2 + i, table=LONG_TABLE)
    f.put_desc(LONG_PIECES + 1, LONG_STATUS, 1, DESC_F_WRITE,
               table=LONG_TABLE)
    for i in range(LONG_N):
        f.put_desc(i, LONG_TABLE, 16 * (LONG_PIECES + 2),
                   DESC_F_INDIRECT, table=LONG_DESC)
        struct.pack_into("<H", f.mem, LONG_AVAIL + 4 + 2 * i, i)
    store_idx(f.mem, LONG_AVAIL + 2, LONG_N)
    os.eventfd_write(f.kick_fd, 1)


def export_churn(q, workdir, victim, rounds=10):
    """block-export-del (mode hard), then block-export-add again, of an
    export whose queues run in io1 and io0 while its frontend has long
    chains in flight, stopped at the bound of their memory, so that each
    completion may wake the queues (bottom halves in io0, then in io1),
    and while another frontend does I/O on the victim (io0 and io1).  The
    export must go within 20 s each time, the daemon stay up.  Before,
    the bottom half that serves the queues again could run in io1 after
    the export was freed (a use after free, which AddressSanitizer shows;
    with MALLOC_PERTURB_ a crash).  An error, or None."""
    stop = threading.Event()
    errors = []

    def io():
        g = Frontend(victim)
        try:
            g.setup()
            n = 0
            while not stop.is_set():
                if g.rw(n % 2 == 0, 8 * (n % 64), 4096,
                        pattern(n, 4096)) != BLK_S_OK:
                    errors.append(f"victim request {n} failed")
                    return
                n += 1
        except (OSError, EOFError, AssertionError) as e:
            errors.append(f"victim: {type(e).__name__}: {e}")
        finally:
            g.close()

    t = threading.Thread(target=io)
    t.start()
    try:
        for i in range(rounds):
            path = os.path.join(workdir, f"churn{i % 2}.sock")
            if os.path.exists(path):
                os.unlink(path)
            q.cmd("block-export-add", **{
                "type": "vhost-user-blk", "id": "churn", "node-name": "mid0",
                "writable": True, "num-queues": 2, "iothread": ["io1", "io0"],
                "addr": {"type": "unix", "path": path}})
            f = Frontend(path, num=LONG_N)
            try:
                submit_long_chains(f)
                time.sleep(0.2 + 0.1 * (i % 5))
                used = struct.unpack_from("<H", f.mem, LONG_USED + 2)[0]
                q.cmd("block-export-del", id="churn", mode="hard")
                deadline = time.monotonic() + 20
                while any(e["id"] == "churn"
                          for e in q.cmd("query-block-exports")):
                    if time.monotonic() > deadline:
                        return (f"round {i}: the export was not deleted in "
                                f"20 s ({used} requests had completed)")
                    time.sleep(0.02)
            finally:
                f.close()
            if errors:
                return f"round {i}: {errors[0]}"
        return None
    except (OSError, EOFError, AssertionError, RuntimeError) as e:
        return f"{type(e).__name__}: {e}"
    finally:
        stop.set()
        t.join(15)


def long_chains(path):
    """Returns an error, or None once every request completed with OK"""
    f = Frontend(path, num=LONG_N)
    try:
        submit_long_chains(f)
        deadline = time.monotonic() + 60
        used = 0
        while time.monotonic() < deadline:
            used = struct.unpack_from("<H", f.mem, LONG_USED + 2)[0]
            if used == LONG_N & 0xffff:
                break
            time.sleep(0.1)
        else:
            return f"{used} of {LONG_N} requests completed"
        if f.mem[LONG_STATUS] != BLK_S_OK:
            return f"status {f.mem[LONG_STATUS]}"
        return None
    except (OSError, EOFError, AssertionError) as e:
        return f"{type(e).__name__}: {e}"
    finally:
        f.close()


def kick_after_close(path):
    """The frontend closes the connection with a request in flight, then
    kicks a new one through the eventfd it still holds."""
    f = Frontend(path)
    try:
        start_slow_read(f)
        f.sock.close()
        time.sleep(0.1)
        f.start(False, 256, 4096, slot=2)
        time.sleep(3)
        return None
    except (OSError, EOFError, AssertionError) as e:
        return f"{type(e).__name__}: {e}"
    finally:
        f.close()


def good_round(path, seed):
    """A well-formed frontend writes, reads back and compares"""
    t0 = time.monotonic()
    try:
        return _good_round(path, seed)
    finally:
        if os.environ.get("VU_HOSTILE_TIMES"):
            print(f"good round on {os.path.basename(path)}: "
                  f"{time.monotonic() - t0:.3f} s", flush=True)


def _good_round(path, seed):
    f = Frontend(path)
    try:
        f.setup()
        data = pattern(seed, 65536)
        status = f.rw(True, 8 * seed, len(data), data)
        if status != BLK_S_OK:
            return f"write failed (status {status})"
        f.mem[DATA:DATA + len(data)] = bytes(len(data))
        status = f.rw(False, 8 * seed, len(data))
        if status != BLK_S_OK:
            return f"read failed (status {status})"
        if f.mem[DATA:DATA + len(data)] != data:
            return "read back other data"
        return None
    except (OSError, EOFError, AssertionError) as e:
        return f"{type(e).__name__}: {e}"
    finally:
        f.close()


def heap_peak(path):
    """The most heap the daemon had, from bench/malloc-count's report"""
    try:
        with open(path) as f:
            for field in f.read().split():
                if field.startswith("peak_live_bytes="):
                    return int(field.split("=")[1])
    except OSError:
        pass
    return None


def backtraces(pid):
    """Every thread's stack of process @pid, if gdb is there"""
    try:
        return subprocess.run(["gdb", "-p", str(pid), "-batch", "-ex",
                               "thread apply all bt 30"], text=True,
                              capture_output=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"(no backtrace: {e})"


def resize_under_io(q, path, rounds=50):
    """block_resize of the image, again and again, while a frontend
    writes and reads on the victim (queues in two IOThreads), with the long
    export never connected: each resize drains the node and notifies the
    exports.  Before: a drain could miss the last request's end and hang,
    and the export without a client crashed the daemon (SIGSEGV).  An
    error, or None."""
    f = Frontend(path)
    errors = []
    stop = threading.Event()

    def io():
        n = 0
        while not stop.is_set() and not errors:
            try:
                st = f.rw(n % 2 == 0, 8 * (n % 64), 4096, pattern(n, 4096))
            except (OSError, EOFError, AssertionError) as e:
                st = f"{type(e).__name__}: {e}"
            if st != BLK_S_OK:
                errors.append(f"request {n}: status {st}")
            n += 1

    try:
        f.setup()
        t = threading.Thread(target=io)
        t.start()
        try:
            for i in range(rounds):
                done = []
                r = threading.Thread(target=lambda: done.append(q.cmd(
                    "block_resize", **{"node-name": "disk0",
                                       "size": 64 << 20})))
                r.start()
                r.join(10)
                if not done:
                    return f"block_resize {i} did not return in 10 s"
        finally:
            stop.set()
            t.join(15)
        if errors:
            return errors[0]
        if not f.alive():
            return "the frontend was dropped"
        return None
    except (OSError, EOFError, AssertionError, RuntimeError) as e:
        return f"{type(e).__name__}: {e}"
    finally:
        f.close()


def unplug_in_flight(q, path):
    """A DIMM unplugged while a request into it is in flight: QEMU's
    frontend sends REM_MEM_REG (VHOST_USER_PROTOCOL_F_CONFIGURE_MEM_SLOTS).
    On the throttled export, a 64 KiB read into a second region of 1 MiB
    takes 2 s.  The export must answer only once the read completed into
    that region, and give the region's registration back before
    libvhost-user unmaps it; the memory left stays registered and served.
    An error, or None."""
    f = Frontend(path)
    fd = os.memfd_create("vu-hostile-dimm")
    os.ftruncate(fd, 1 << 20)
    dimm = mmap.mmap(fd, 1 << 20)
    gpa = 1 << 28
    region = struct.pack("<QQQQQ", 0, gpa, 1 << 20, QVA + gpa, 0)
    try:
        f.setup(protocol=PROTOCOL_F_CONFIGURE_MEM_SLOTS)
        f.send(ADD_MEM_REG, region, [fd], flags=VERSION | NEED_REPLY)
        f.recv_u64(ADD_MEM_REG)
        if registered(q, MEM + (1 << 20)) != MEM + (1 << 20):
            return "the second region was not registered"
        # the throttle's budget goes to this write: the read waits
        if f.rw(True, 0, 65536, pattern(7, 65536)) != BLK_S_OK:
            return "the priming write failed"
        dimm[:65536] = bytes([0xee]) * 65536
        struct.pack_into("<IIQ", f.mem, HDR, BLK_T_IN, 0, 0)
        f.mem[STATUS] = 0xff
        f.put_desc(0, HDR, 16, DESC_F_NEXT, 1)
        f.put_desc(1, gpa, 65536, DESC_F_NEXT | DESC_F_WRITE, 2)
        f.put_desc(2, STATUS, 1, DESC_F_WRITE)
        f.submit(0)
        time.sleep(0.2)
        if f.used_idx() != 1:
            return "the read into the DIMM was not in flight"
        f.send(REM_MEM_REG, region, flags=VERSION | NEED_REPLY)
        f.recv_u64(REM_MEM_REG)
        if f.used_idx() != 2 or f.mem[STATUS] != BLK_S_OK:
            return "REM_MEM_REG was answered before the read into it ended"
        f.used_seen += 1
        if dimm[:65536] != pattern(7, 65536):
            return "the read did not land in the region"
        if registered(q, MEM) != MEM:
            return "the unplugged region is still registered"
        st = f.rw(False, 8, 4096)
        if st != BLK_S_OK:
            return f"a read into the memory left failed (status {st})"
        return None if f.alive() else "the daemon dropped the frontend"
    except (OSError, EOFError, AssertionError, RuntimeError) as e:
        return f"{type(e).__name__}: {e}"
    finally:
        f.close()
        dimm.close()
        os.close(fd)


def config_change(q, path):
    """A frontend that set up the back-end channel (SET_BACKEND_REQ_FD)
    hears of a resize there: VHOST_USER_BACKEND_CONFIG_CHANGE_MSG, as
    QEMU's vhost-user-blk waits for to read the new capacity.  An error,
    or None."""
    f = Frontend(path)
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        f.setup(protocol=PROTOCOL_F_BACKEND_REQ | PROTOCOL_F_CONFIG)
        f.send(SET_BACKEND_REQ_FD, fds=[theirs.fileno()])
        theirs.close()
        if not f.alive():
            return "the daemon dropped the frontend at SET_BACKEND_REQ_FD"
        q.cmd("block_resize", **{"node-name": "disk0", "size": 64 << 20})
        ours.settimeout(5)
        hdr = ours.recv(12)
        if len(hdr) < 12:
            return "no message on the back-end channel"
        req = struct.unpack_from("<I", hdr)[0]
        if req != BACKEND_CONFIG_CHANGE_MSG:
            return f"message {req} on the back-end channel"
        return None if f.alive() else "the daemon dropped the frontend"
    except (OSError, EOFError, AssertionError, RuntimeError) as e:
        return f"{type(e).__name__}: {e}"
    finally:
        ours.close()
        f.close()


def listening(qsd, *paths, timeout=30):
    """Whether daemon @qsd listens on all @paths within @timeout seconds"""
    deadline = time.monotonic() + timeout
    while not all(os.path.exists(p) for p in paths):
        if time.monotonic() > deadline or qsd.poll() is not None:
            return False
        time.sleep(0.05)
    return True


def own_daemon(a, workdir, args):
    """A daemon of a case's own, with @args (an export on vu.sock in
    @workdir) and its monitor on qmp.sock there: (the process, vu.sock,
    qmp.sock), the process None if it did not listen"""
    path = os.path.join(workdir, "vu.sock")
    qmp_sock = os.path.join(workdir, "qmp.sock")
    qsd = subprocess.Popen([a.qsd] + args + [
        "--chardev", f"socket,id=m,path={qmp_sock},server=on,wait=off",
        "--monitor", "chardev=m"], stderr=subprocess.PIPE, text=True)
    if not listening(qsd, path, qmp_sock):
        qsd.kill()
        qsd.wait()
        return None, path, qmp_sock
    return qsd, path, qmp_sock


def start_daemon(a, workdir, disk, malloc_count=None):
    """The daemon with its four exports of @disk, once they listen:
    (sockets by export, the QMP socket, the process, malloc-count's file)"""
    sock = {n: os.path.join(workdir, f"{n}.sock")
            for n in ("victim", "bystander", "slow", "long", "slow1")}
    qmp_sock = os.path.join(workdir, "qmp.sock")
    for p in list(sock.values()) + [qmp_sock]:
        if os.path.exists(p):
            os.unlink(p)
    cmd = [a.qsd, "--object", "iothread,id=io0", "--object", "iothread,id=io1",
           "--object", f"throttle-group,id=tg0,limits.bps-total={SLOW_BPS}",
           "--blockdev", f"file,node-name=disk0,filename={disk},"
                         "aio=io_uring,cache.direct=on,aio-fixed-buffers=on",
           "--blockdev", "throttle,node-name=slow0,throttle-group=tg0,"
                         "file=disk0",
           "--object", "throttle-group,id=tg1,limits.iops-total=2000",
           "--blockdev", "throttle,node-name=mid0,throttle-group=tg1,"
                         "file=disk0"]
    # The bystander moves the image to io0; the victim's and the slow
    # export's queues run in io0 and io1, their messages where the image is
    threads = {"victim": "iothread.0=io0,iothread.1=io1",
               "bystander": "iothread=io0",
               "slow": "iothread.0=io1,iothread.1=io0",
               "long": "iothread.0=io1,num-queues=1",
               "slow1": "iothread=io0,num-queues=1"}
    nodes = {"slow": "slow0", "long": "mid0", "slow1": "slow0"}
    for name, path in sock.items():
        cmd += ["--export", f"vhost-user-blk,id={name},"
                f"node-name={nodes.get(name, 'disk0')},writable=on,"
                f"addr.type=unix,addr.path={path},"
                + ("" if "num-queues" in threads[name] else "num-queues=4,")
                + threads[name]]
    cmd += ["--chardev", f"socket,id=m,path={qmp_sock},server=on,wait=off",
            "--monitor", "chardev=m"]
    print("$ " + " ".join(cmd), flush=True)
    env = dict(os.environ)
    mc_out = os.path.join(workdir, "malloc-count")
    preload = []
    if malloc_count:
        preload.append(malloc_count)
        env.update(MALLOC_COUNT_OUT=mc_out)
    if a.fd_check:
        preload.append(a.fd_check)
        env.update(FD_CHECK_OUT=os.path.join(workdir, "fd-check"))
    if preload:
        env.update(LD_PRELOAD=" ".join(preload))
    qsd = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env=env)
    if not listening(qsd, *sock.values()):
        raise RuntimeError("the daemon did not listen")
    return sock, qmp_sock, qsd, mc_out


def restart_in_flight(a, disk, export):
    """The daemon is killed (SIGKILL) with a throttled read in flight
    behind a request that completed after it (out of order, as io_uring
    completes them), and a new daemon takes the socket.  The frontend
    keeps its memory and the in-flight table, and restores the ring's
    base from its used index, as QEMU does when it cannot ask a dead
    back-end: the new daemon must complete the read, once, without a
    kick, and not the other request again.  An error, or None."""
    workdir = os.path.join(a.workdir, "restart-" + export)
    os.makedirs(workdir, exist_ok=True)
    sock, _, qsd, _ = start_daemon(a, workdir, disk)
    f = Frontend(sock[export])
    try:
        f.setup(inflight=True)
        if f.rw(True, 0, 65536, pattern(9, 65536)) != BLK_S_OK:
            return "the priming write failed"
        f.start(False, 0, 65536, slot=1)            # head 3: in flight
        struct.pack_into("<IIQ", f.mem, HDR + 32, BLK_T_GET_ID, 0, 0)
        f.mem[STATUS + 2] = 0xff
        f.put_desc(6, HDR + 32, 16, DESC_F_NEXT, 7)
        f.put_desc(7, DATA + 2 * 65536, 20, DESC_F_NEXT | DESC_F_WRITE, 8)
        f.put_desc(8, STATUS + 2, 1, DESC_F_WRITE)
        f.submit(6)                                 # completes at once
        deadline = time.monotonic() + 5
        while f.used_idx() != 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        head = struct.unpack_from("<I", f.mem, USED + 4 + 8)[0]
        if f.used_idx() != 2 or head != 6:
            return (f"GET_ID did not complete before the read (used index "
                    f"{f.used_idx()}, head {head})")
        qsd.kill()
        qsd.wait()
        if f.used_idx() != 2:
            return "the read completed before the daemon was killed"
        sock, qmp_sock, qsd, _ = start_daemon(a, workdir, disk)
        q = QMP(qmp_sock)
        f.reconnect(sock[export])
        # The memory registered and the queues served before the ring
        # starts: only the ring's start may serve the read again
        def pinned():
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                info = q.cmd("x-query-io-uring-buffers")
                if info["registered-bytes"] == MEM and not info["pinning"]:
                    break
                time.sleep(0.05)
            time.sleep(0.2)
        f.setup(inflight=True, base=f.used_idx(), after_mem=pinned)
        deadline = time.monotonic() + 10
        while f.used_idx() == 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        used = f.used_idx()
        head = struct.unpack_from("<I", f.mem, USED + 4 + 8 * 2)[0]
        if used != 3 or head != 3:
            return (f"the new daemon did not complete the read in flight "
                    f"(used index {used}, head {head})")
        if f.mem[STATUS + 1] != BLK_S_OK or \
                f.mem[DATA + 65536:DATA + 131072] != pattern(9, 65536):
            return "the read completed with other data or status"
        time.sleep(1)
        if f.used_idx() != 3:
            return "the new daemon completed a request again"
        os.eventfd_write(f.kick_fd, 1)
        time.sleep(0.5)
        if f.used_idx() != 3 or not f.alive():
            return "a kick made the daemon complete a request again"
        return None
    except (OSError, EOFError, AssertionError) as e:
        return f"{type(e).__name__}: {e}"
    finally:
        f.close()
        if qsd.poll() is None:
            qsd.kill()
            qsd.wait()


def stop_in_drain(a, multi):
    """SIGTERM while block_resize holds a drain of the export's node: the
    resize of a qcow2 image waits for its header write, held by a
    throttle under the image (the bucket primed by the frontend's write),
    while the daemon quits and stops the export.  A frontend that
    accepted pinning is connected, its memory registered.  The daemon
    must end the connection once the drain ends and exit with status 0.
    Before: with one AioContext, SIGSEGV (the stop set fd handlers in the
    NULL context of the drained server); with queues in two IOThreads,
    SIGABRT (the export was freed with the memory still registered).  An
    error, or None."""
    workdir = os.path.join(a.workdir, "drain-" + ("multi" if multi
                                                  else "single"))
    os.makedirs(workdir, exist_ok=True)
    qemu_img = a.qemu_img or os.path.join(
        os.path.dirname(os.path.dirname(a.qsd)), "qemu-img")
    img = os.path.join(workdir, "img.qcow2")
    subprocess.run([qemu_img, "create", "-q", "-f", "qcow2", img, "64M"],
                   check=True)
    path = os.path.join(workdir, "vu.sock")
    qsd, path, qmp_sock = own_daemon(a, workdir, [
        "--object", "iothread,id=io0", "--object", "iothread,id=io1",
        "--object", "throttle-group,id=tg,limits.bps-total=65536",
        "--blockdev", f"file,node-name=file0,filename={img},"
                      "aio=io_uring,cache.direct=on,aio-fixed-buffers=on",
        "--blockdev", "throttle,node-name=thr0,throttle-group=tg,file=file0",
        "--blockdev", "qcow2,node-name=disk0,file=thr0",
        "--export", "vhost-user-blk,id=v,node-name=disk0,writable=on,"
                    f"addr.type=unix,addr.path={path}" +
        (",num-queues=2,iothread.0=io0,iothread.1=io1" if multi else "")])
    if qsd is None:
        return "the daemon did not listen"
    f = None
    try:
        q = QMP(qmp_sock)
        f = Frontend(path)
        f.setup()
        if f.rw(True, 0, 65536, pattern(3, 65536)) != BLK_S_OK:
            return "the first write failed"
        if registered(q, MEM) != MEM:
            return "the frontend's memory was not registered"
        # 320 KiB in the bucket of 64 KiB/s: the next request waits 4 s
        if f.rw(True, 128, 256 << 10, pattern(4, 256 << 10)) != BLK_S_OK:
            return "the priming write failed"
        def resize():
            try:
                q.cmd("block_resize", **{"node-name": "disk0",
                                         "size": 65 << 20})
            except (OSError, EOFError):
                pass    # the daemon may go before it answers
        threading.Thread(target=resize, daemon=True).start()
        time.sleep(0.5)
        qsd.send_signal(15)
        try:
            qsd.wait(timeout=30)
        except subprocess.TimeoutExpired:
            print("the daemon did not quit; its threads:\n" +
                  backtraces(qsd.pid), flush=True)
            return "the daemon did not quit in 30 s"
        if qsd.returncode != 0:
            return (f"exit status {qsd.returncode}: " +
                    qsd.stderr.read().strip()[-300:])
        return None
    except (OSError, EOFError, AssertionError, RuntimeError,
            subprocess.CalledProcessError) as e:
        return f"{type(e).__name__}: {e}"
    finally:
        if f:
            f.close()
        if qsd.poll() is None:
            qsd.kill()
            qsd.wait()


def iothread_del(a, disk):
    """object-del of an IOThread that an export's queue runs in, while a
    frontend uses it: refused, or the thread stays until the export goes.
    Either way the queue's next request completes, the frontend is
    served, and the export and then the daemon go cleanly.  Before: the
    IOThread stopped and its AioContext was freed under the queue's kick
    handler: the request never completed.  An error, or None."""
    workdir = os.path.join(a.workdir, "iothread-del")
    os.makedirs(workdir, exist_ok=True)
    path = os.path.join(workdir, "vu.sock")
    qsd, path, qmp_sock = own_daemon(a, workdir, [
        "--object", "iothread,id=io0", "--object", "iothread,id=io2",
        "--blockdev", f"file,node-name=disk0,filename={disk}",
        "--export", "vhost-user-blk,id=x,node-name=disk0,writable=on,"
                    f"addr.type=unix,addr.path={path},num-queues=2,"
                    "iothread.0=io2,iothread.1=io0"])
    if qsd is None:
        return "the daemon did not listen"
    f = None
    try:
        q = QMP(qmp_sock)
        f = Frontend(path)
        f.setup()       # queue 0: in io2
        if f.rw(True, 0, 4096, pattern(5, 4096)) != BLK_S_OK:
            return "the first write failed"
        try:
            q.cmd("object-del", id="io2")
            refused = False
        except RuntimeError:
            refused = True
        f.mem[DATA:DATA + 4096] = bytes(4096)
        if f.rw(False, 0, 4096) != BLK_S_OK or \
                f.mem[DATA:DATA + 4096] != pattern(5, 4096):
            return (f"after object-del ({'refused' if refused else 'done'}) "
                    "the queue's read failed")
        if not f.alive():
            return "the daemon dropped the frontend"
        f.close()
        f = None
        q.cmd("block-export-del", id="x")
        deadline = time.monotonic() + 10
        while q.cmd("query-block-exports"):
            if time.monotonic() > deadline:
                return "the export was not deleted in 10 s"
            time.sleep(0.05)
        try:
            q.cmd("quit")
        except (OSError, EOFError):
            pass
        try:
            qsd.wait(timeout=20)
        except subprocess.TimeoutExpired:
            return "the daemon did not quit in 20 s"
        if qsd.returncode != 0:
            return (f"exit status {qsd.returncode}: " +
                    qsd.stderr.read().strip()[-300:])
        return None
    except (OSError, EOFError, AssertionError, RuntimeError) as e:
        return f"{type(e).__name__}: {e}"
    finally:
        if f:
            f.close()
        if qsd.poll() is None:
            qsd.kill()
            qsd.wait()


# A second queue, for throttle_wakes() and queue_share(): its ring, one
# request's buffers, and an indirect table
Q1_DESC, Q1_AVAIL, Q1_USED = 0x200000, 0x210000, 0x220000
Q1_HDR, Q1_DATA, Q1_STATUS = 0x230000, 0x240000, 0x250000
Q1_TABLE = 0x260000


def two_queue_daemon(a, disk, name, limits, extra=()):
    """A daemon of its own for case @name: an export of two queues, in
    IOThreads io1 and io0, on @disk behind a throttle group of @limits
    (its 'limits.' options).  (The process or None, the socket)"""
    workdir = os.path.join(a.workdir, name)
    os.makedirs(workdir, exist_ok=True)
    path = os.path.join(workdir, "vu.sock")
    qsd, path, _ = own_daemon(a, workdir, [
        "--object", "iothread,id=io0", "--object", "iothread,id=io1",
        "--object", f"throttle-group,id=tg,limits.{limits}",
        "--blockdev", f"file,node-name=disk0,filename={disk}",
        "--blockdev", "throttle,node-name=t0,throttle-group=tg,file=disk0",
        "--export", "vhost-user-blk,id=x,node-name=t0,writable=on,"
                    f"addr.type=unix,addr.path={path},num-queues=2,"
                    "iothread.0=io1,iothread.1=io0", *extra])
    return qsd, path


def setup_two_queues(f, num):
    """Set @f up with queue 0 on the long chains' ring and queue 1 of @num
    entries on the Q1 ring: queue 1's call and kick fds"""
    f.setup(ring=(LONG_DESC, LONG_AVAIL, LONG_USED))
    call1 = f.vring_fd(SET_VRING_CALL, 1)
    f.vring_num(1, num)
    f.vring_base(1, 0)
    f.vring_addr(1, Q1_DESC, Q1_AVAIL, Q1_USED)
    return call1, f.vring_fd(SET_VRING_KICK, 1)


def throttle_wakes(a, disk, n=2000):
    """Queue 0 stops at the bound of long chains in flight while queue 1
    completes @n requests (GET_ID: no I/O, so the throttle that keeps
    queue 0's chains in flight does not hold them): queue 1's completions
    must not serve the queues again, each one (before: one throttled flag
    for the export, so each of them woke every queue, and queue 0 stopped
    again at once).  Counted with the trace event
    vhost_user_server_serve_queues.  An error, or None."""
    qsd, path = two_queue_daemon(a, disk, "throttle-wakes",
                                 "iops-total=500",
                                 ["--trace", "vhost_user_server_serve_queues"])
    if qsd is None:
        return "the daemon did not listen"
    f = None
    try:
        f = Frontend(path, num=LONG_N)
        call1, kick1 = setup_two_queues(f, 64)
        # Messages on rings wait for the requests in flight: the daemon
        # must have handled them all before queue 0 fills up
        if not f.alive():
            return "the daemon dropped the frontend"
        submit_long_chains(f, setup=False)
        time.sleep(0.5)
        t0 = time.monotonic()
        struct.pack_into("<IIQ", f.mem, Q1_HDR, BLK_T_GET_ID, 0, 0)
        f.put_desc(0, Q1_HDR, 16, DESC_F_NEXT, 1, table=Q1_DESC)
        f.put_desc(1, Q1_DATA, 20, DESC_F_NEXT | DESC_F_WRITE, 2,
                   table=Q1_DESC)
        f.put_desc(2, Q1_STATUS, 1, DESC_F_WRITE, table=Q1_DESC)
        for i in range(n):
            struct.pack_into("<H", f.mem, Q1_AVAIL + 4 + 2 * (i % 64), 0)
            store_idx(f.mem, Q1_AVAIL + 2, i + 1)
            os.eventfd_write(kick1, 1)
            deadline = time.monotonic() + 5
            while struct.unpack_from("<H", f.mem, Q1_USED + 2)[0] != \
                    (i + 1) & 0xffff:
                if time.monotonic() > deadline:
                    qsd.kill()
                    err = qsd.communicate(timeout=30)[1]
                    return (f"queue 1's request {i} did not complete "
                            f"(queue 0 at "
                            f"{struct.unpack_from('<H', f.mem, LONG_USED + 2)[0]}"
                            f"): {err[-500:]}")
            if f.mem[Q1_STATUS] != BLK_S_OK:
                return f"queue 1's request {i} failed"
        used = struct.unpack_from("<H", f.mem, LONG_USED + 2)[0]
        took = time.monotonic() - t0
        if used >= LONG_N - 100:
            return (f"queue 0 was not held at its bound ({used} of {LONG_N} "
                    f"chains done after queue 1's {took:.1f} s)")
        os.close(call1)
        os.close(kick1)
        qsd.kill()      # not to wait for queue 0's chains
        _, err = qsd.communicate(timeout=30)
        serves = err.count("vhost_user_server_serve_queues")
        print(f"throttle wakes: {serves} serves of the queues for {n} "
              f"completions on queue 1 in {took:.1f} s, queue 0 at {used}",
              flush=True)
        if serves > n // 20:
            return (f"{serves} serves of the queues for {n} completions of "
                    "the other queue")
        return None
    except (OSError, EOFError, AssertionError, subprocess.TimeoutExpired) \
            as e:
        return f"{type(e).__name__}: {e}"
    finally:
        if f:
            f.close()
        if qsd.poll() is None:
            qsd.kill()
            qsd.wait()


def queue_share(a, disk, n=64, limit=2.0):
    """Queue 0 fills the export's bound of long chains in flight with
    reads that the throttle holds (a read of 4 KiB on queue 1 took what
    it lets through for a minute); then queue 1 submits @n chains as long
    (GET_ID: no I/O).  Each queue may always have its equal part of the
    bound out, so queue 1's must complete within @limit seconds; with
    one bound for the whole export they waited for queue 0's reads.  An
    error, or None."""
    qsd, path = two_queue_daemon(a, disk, "queue-share", "bps-total=64")
    if qsd is None:
        return "the daemon did not listen"
    f, kicks = None, ()
    try:
        f = Frontend(path, num=LONG_N)
        kicks = setup_two_queues(f, n)
        kick1 = kicks[1]
        if not f.alive():
            return "the daemon dropped the frontend"
        struct.pack_into("<IIQ", f.mem, Q1_HDR, BLK_T_IN, 0, 0)
        f.put_desc(0, Q1_HDR, 16, DESC_F_NEXT, 1, table=Q1_DESC)
        f.put_desc(1, Q1_DATA, 4096, DESC_F_NEXT | DESC_F_WRITE, 2,
                   table=Q1_DESC)
        f.put_desc(2, Q1_STATUS, 1, DESC_F_WRITE, table=Q1_DESC)
        struct.pack_into("<H", f.mem, Q1_AVAIL + 4, 0)
        store_idx(f.mem, Q1_AVAIL + 2, 1)
        os.eventfd_write(kick1, 1)
        deadline = time.monotonic() + 5
        while struct.unpack_from("<H", f.mem, Q1_USED + 2)[0] != 1:
            if time.monotonic() > deadline:
                return "queue 1's first read did not complete"
            time.sleep(0.01)
        submit_long_chains(f, setup=False)
        time.sleep(1)
        struct.pack_into("<IIQ", f.mem, Q1_HDR, BLK_T_GET_ID, 0, 0)
        f.put_desc(0, Q1_HDR, 16, DESC_F_NEXT, 1, table=Q1_TABLE)
        for i in range(LONG_PIECES):
            f.put_desc(1 + i, Q1_DATA + i, 1, DESC_F_WRITE | DESC_F_NEXT,
                       2 + i, table=Q1_TABLE)
        f.put_desc(LONG_PIECES + 1, Q1_STATUS, 1, DESC_F_WRITE,
                   table=Q1_TABLE)
        f.mem[Q1_STATUS] = 0xff
        for i in range(n):
            f.put_desc(i, Q1_TABLE, 16 * (LONG_PIECES + 2), DESC_F_INDIRECT,
                       table=Q1_DESC)
            struct.pack_into("<H", f.mem, Q1_AVAIL + 4 + 2 * ((1 + i) % n),
                             i)
        held = struct.unpack_from("<H", f.mem, LONG_USED + 2)[0]
        t0 = time.monotonic()
        store_idx(f.mem, Q1_AVAIL + 2, 1 + n)
        os.eventfd_write(kick1, 1)
        done = 0
        while time.monotonic() - t0 < limit:
            done = struct.unpack_from("<H", f.mem, Q1_USED + 2)[0] - 1
            if done == n:
                break
            time.sleep(0.01)
        took = time.monotonic() - t0
        used = struct.unpack_from("<H", f.mem, LONG_USED + 2)[0]
        print(f"queue share: queue 1's {done} of {n} long chains in "
              f"{took:.2f} s, queue 0 at {held} then {used} of {LONG_N}",
              flush=True)
        if used:
            # Each completion leaves room for one chain of queue 1's,
            # which completes before the next: the case tests nothing
            return (f"queue 0 completed {used} reads: the throttle did not "
                    "hold them")
        if done != n:
            return (f"{done} of queue 1's {n} long chains completed in "
                    f"{limit} s")
        if f.mem[Q1_STATUS] != BLK_S_OK:
            return f"queue 1's status {f.mem[Q1_STATUS]}"
        return None
    except (OSError, EOFError, AssertionError) as e:
        return f"{type(e).__name__}: {e}"
    finally:
        if f:
            for fd in kicks:
                os.close(fd)
            f.close()
        if qsd.poll() is None:
            qsd.kill()
            qsd.wait()


def maps(pid):
    """How many mappings process @pid has: two a coroutine stack"""
    with open(f"/proc/{pid}/maps") as m:
        return sum(1 for _ in m)


def burst(f, n, timeout=30):
    """@n reads of 4 KiB in flight at once on @f's queue 0, all through
    the descriptors of slot 0; wait for them.  None, or what went wrong."""
    f.start(False, 0, 4096)
    for _ in range(n - 1):
        f.submit(0)
    want = f.avail_idx & 0xffff
    deadline = time.monotonic() + timeout
    while f.used_idx() != want:
        if time.monotonic() > deadline:
            stuck = f.used_idx()
            os.eventfd_write(f.kick_fd, 1)
            time.sleep(2)
            err = (f"{(want - stuck) & 0xffff} of {n} reads not completed "
                   f"in {timeout} s; after one more kick, "
                   f"{(want - f.used_idx()) & 0xffff}")
            # Popped (the ring's base is past them) or never popped?
            try:
                f.send(GET_VRING_BASE, struct.pack("<II", 0, 0))
                base = f.recv_u64(GET_VRING_BASE) >> 32
                return err + f"; the ring's base {base}, avail {want}"
            except (OSError, EOFError) as e:
                return err + f"; GET_VRING_BASE: {type(e).__name__}: {e}"
        time.sleep(0.01)
    f.used_seen = f.avail_idx
    return None


def pool_given_back(a, disk, deep=4096, shallow=256, bursts=16):
    """A frontend's ring of @deep entries on export x grows the process's
    coroutine pool by half of them while it runs (a burst of @deep
    throttled reads leaves that many coroutines in the pool); it hangs up
    without stopping its ring, so only the connection's end can give that
    growth back.  Then a frontend on export y, with a ring of @shallow
    entries, runs @bursts bursts of as many reads: each takes coroutines
    from the pool and, the pool being back to its size, deletes what it
    returns beyond it.  The daemon's mappings (two a coroutine stack) must
    fall by at least half of what the first frontend left; without the
    give-back the pool kept them all.  (On export x, the second frontend's
    ring would set the share of queue 0 anew.)  An error, or None."""
    workdir = os.path.join(a.workdir, "pool-given-back")
    os.makedirs(workdir, exist_ok=True)
    path = os.path.join(workdir, "vu.sock")      # own_daemon()'s
    path2 = os.path.join(workdir, "vu2.sock")
    qsd, _, _ = own_daemon(a, workdir, [
        "--object", "iothread,id=io0",
        "--object", "throttle-group,id=tg,limits.iops-total=4000",
        "--blockdev", f"file,node-name=disk0,filename={disk}",
        "--blockdev", "throttle,node-name=t0,throttle-group=tg,file=disk0",
        "--export", "vhost-user-blk,id=x,node-name=t0,writable=on,"
                    f"addr.type=unix,addr.path={path},iothread=io0",
        "--export", "vhost-user-blk,id=y,node-name=t0,writable=on,"
                    f"addr.type=unix,addr.path={path2},iothread=io0"])
    if qsd is None:
        return "the daemon did not listen"
    f = None
    try:
        if not listening(qsd, path2):
            return "the daemon did not listen on its second export"
        before = maps(qsd.pid)
        f = Frontend(path, num=deep)
        f.setup(ring=(LONG_DESC, LONG_AVAIL, LONG_USED))
        # Every read through one chain: head 0 of the long chains' ring
        struct.pack_into("<IIQ", f.mem, LONG_HDR, BLK_T_IN, 0, 0)
        f.put_desc(0, LONG_HDR, 16, DESC_F_NEXT, 1, table=LONG_DESC)
        f.put_desc(1, LONG_DATA, 4096, DESC_F_NEXT | DESC_F_WRITE, 2,
                   table=LONG_DESC)
        f.put_desc(2, LONG_STATUS, 1, DESC_F_WRITE, table=LONG_DESC)
        for i in range(deep):
            struct.pack_into("<H", f.mem, LONG_AVAIL + 4 + 2 * i, 0)
        store_idx(f.mem, LONG_AVAIL + 2, deep)
        os.eventfd_write(f.kick_fd, 1)
        deadline = time.monotonic() + 30
        while struct.unpack_from("<H", f.mem, LONG_USED + 2)[0] != \
                deep & 0xffff:
            if time.monotonic() > deadline:
                return "the deep frontend's reads did not complete"
            time.sleep(0.01)
        f.close()
        f = None
        time.sleep(0.5)
        left = maps(qsd.pid)
        if left - before < deep // 2:
            return (f"the deep frontend left {left - before} mappings: the "
                    "case cannot tell")
        f = Frontend(path2, num=shallow)
        f.setup()
        for i in range(bursts):
            err = burst(f, shallow)
            if err:
                qsd.kill()
                out = qsd.communicate(timeout=30)[1].strip()
                return (f"burst {i} of the shallow frontend: {err}; the "
                        f"daemon said: {out[-600:] or 'nothing'}")
        after = maps(qsd.pid)
        print(f"pool given back: {before} mappings, {left} once the deep "
              f"frontend left, {after} after {bursts} bursts of {shallow}",
              flush=True)
        if left - after < (left - before) // 2:
            return (f"{left - after} of the {left - before} mappings the deep "
                    "frontend left were given back")
        return None
    except (OSError, EOFError, AssertionError) as e:
        return f"{type(e).__name__}: {e}"
    finally:
        if f:
            f.close()
        if qsd.poll() is None:
            qsd.kill()
            qsd.wait()


def quit_busy(a, disk, rounds=5):
    """QMP quit while a frontend is connected to each export, one has a
    request in flight, two closed their sockets a moment ago: the daemon
    must exit (before the drain's wake-up: it hung in 4 of 10 tries with
    queues in IOThreads).  An error, or None."""
    for i in range(rounds):
        workdir = os.path.join(a.workdir, f"quit{i}")
        os.makedirs(workdir, exist_ok=True)
        sock, qmp_sock, qsd, _ = start_daemon(a, workdir, disk)
        fs = []
        try:
            for name in ("victim", "bystander", "long"):
                f = Frontend(sock[name])
                fs.append(f)
                f.setup()
                if f.rw(True, 0, 4096, pattern(i, 4096)) != BLK_S_OK:
                    return f"round {i}: a write on {name} failed"
            f = Frontend(sock["slow"])
            fs.append(f)
            start_slow_read(f)
            fs[0].sock.close()
            fs[1].sock.close()
            try:
                QMP(qmp_sock).cmd("quit")
            except (OSError, EOFError):
                pass
            try:
                qsd.wait(timeout=20)
            except subprocess.TimeoutExpired:
                print("the daemon did not quit; its threads:\n" +
                      backtraces(qsd.pid), flush=True)
                return f"round {i}: the daemon did not quit in 20 s"
            if qsd.returncode != 0:
                return f"round {i}: exit status {qsd.returncode}"
        except (OSError, EOFError, AssertionError) as e:
            return f"round {i}: {type(e).__name__}: {e}"
        finally:
            for f in fs:
                try:
                    f.close()
                except OSError:
                    pass
            if qsd.poll() is None:
                qsd.kill()
                qsd.wait()
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--qsd", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--qemu-img", help="qemu-img for the qcow2 image of "
                    "stop-in-drain (default: beside --qsd's directory)")
    ap.add_argument("--tsan-log", metavar="DIR",
                    help="the daemon is a ThreadSanitizer build logging to "
                    "DIR/tsan.PID: check that no race it reports is in the "
                    "export's code")
    ap.add_argument("--fd-check", metavar="LIB",
                    help="bench/fd-check's preload: the daemon must close "
                    "no descriptor twice")
    ap.add_argument("--malloc-count", metavar="LIB",
                    help="bench/malloc-count's preload: check the heap")
    ap.add_argument("--case", action="append", choices=sorted(CASES) +
                    ["stop-in-flight", "kick-after-close", "long-chains",
                     "close-in-drain",
                     "messages-under-io", "export-churn",
                     "stop-in-drain", "iothread-del", "throttle-wakes",
                     "queue-share", "pool-given-back",
                     "quit-busy", "resize-under-io", "pinning",
                     "config-change", "unplug-in-flight",
                     "restart-in-flight", "avail-past-ring"],
                    help="run only these (default: all)")
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    disk = os.path.join(a.workdir, "disk.img")
    with open(disk, "wb") as f:
        f.truncate(64 << 20)
    sock, qmp_sock, qsd, mc_out = start_daemon(a, a.workdir, disk,
                                               a.malloc_count)
    results = []
    try:
        q = QMP(qmp_sock)
        if "pinning" in (a.case or ["pinning"]):
            results += pinning_contract(q, sock["bystander"])
        err = good_round(sock["victim"], 1)
        results.append((err is None, f"a well-formed frontend reads back "
                        f"what it wrote{': ' + err if err else ''}"))
        for path in (sock["victim"], sock["bystander"]):
            err = remap_round(path, 1000)
            results.append((err is None, "a frontend that moves its memory "
                            f"reads and writes the new memory only "
                            f"({os.path.basename(path)}){': ' + err if err else ''}"))
        if "resize-under-io" in (a.case or ["resize-under-io"]):
            err = resize_under_io(q, sock["victim"])
            up = qsd.poll() is None
            results.append((err is None and up, "50 resizes of the image "
                            "while a frontend does I/O, one export never "
                            "connected: every request completes, the daemon "
                            "is up" + (f": {err}" if err else "") +
                            ("" if up else f" (exit status {qsd.returncode})")))
        if "unplug-in-flight" in (a.case or ["unplug-in-flight"]):
            err = unplug_in_flight(q, sock["slow"])
            results.append((err is None, "a region removed (REM_MEM_REG) "
                            "with a read into it in flight: answered once "
                            "the read completed, its registration given "
                            "back" + (f": {err}" if err else "")))
        if "config-change" in (a.case or ["config-change"]):
            err = config_change(q, sock["bystander"])
            results.append((err is None, "a frontend with the back-end "
                            "channel hears of a resize there"
                            + (f": {err}" if err else "")))
        if "close-in-drain" in (a.case or ["close-in-drain"]):
            err = close_in_drain(q, sock["slow1"])
            up = qsd.poll() is None
            results.append((err is None and up, "a frontend hangs up with "
                            "a read in flight, and a drain begins before it "
                            "completes: the connection ends in the drain, "
                            "the next frontend is served"
                            + (f": {err}" if err else "") +
                            ("" if up else f" (exit status {qsd.returncode})")))
        if "stop-in-flight" in (a.case or ["stop-in-flight"]):
            err = stop_in_flight(sock["slow"])
            results.append((err is None, "a ring stops once its request in "
                            f"flight completed{': ' + err if err else ''}"))
        if "export-churn" in (a.case or ["export-churn"]):
            err = export_churn(q, a.workdir, sock["victim"])
            up = qsd.poll() is None
            results.append((err is None and up, "an export deleted and added "
                            "again 10 times under I/O, its queues in two "
                            "IOThreads stopped at a bound: the daemon is up"
                            + (f": {err}" if err else "") + ("" if up else
                            f" (exit status {qsd.returncode})")))
        if "messages-under-io" in (a.case or ["messages-under-io"]):
            err = messages_under_io(sock["slow"])
            results.append((err is None, "messages that change nothing the "
                            "queues use are answered within 100 ms with 64 "
                            "requests in flight on queues in two IOThreads"
                            + (f": {err}" if err else "")))
        if "kick-after-close" in (a.case or ["kick-after-close"]):
            err = kick_after_close(sock["slow"])
            up = qsd.poll() is None
            results.append((err is None and up, "a kick after the frontend "
                            "left with a request in flight: the daemon is up"
                            + (f": {err}" if err else "") + ("" if up else
                            f" (exit status {qsd.returncode})")))
        if "long-chains" in (a.case or ["long-chains"]):
            err = long_chains(sock["long"])
            results.append((err is None, f"{LONG_N} requests of "
                            f"{LONG_PIECES + 2}-piece chains complete"
                            + (f": {err}" if err else "")))
        if "avail-past-ring" in (a.case or ["avail-past-ring"]):
            err = avail_past_ring(sock["victim"])
            up = qsd.poll() is None
            results.append((err is None and up, "a driver that moves the "
                            "avail index past the ring's size: the device "
                            "stops at once and serves none of its entries"
                            + (f": {err}" if err else "")
                            + ("" if up else
                               f" (exit status {qsd.returncode})")))
        cases = [c for c in a.case or CASES if c in CASES]
        for seed, name in enumerate(cases, 2):
            if qsd.poll() is not None:
                break
            f = Frontend(sock["victim"])
            try:
                CASES[name](f)
            except (OSError, EOFError):
                pass    # the daemon dropped us: fine
            time.sleep(0.2)
            dropped = qsd.poll() is None and not f.alive()
            f.close()
            up = qsd.poll() is None
            results.append((dropped or not up, f"{name}: the export stopped "
                            "the device and dropped the frontend"))
            results.append((up, f"{name}: the daemon is up"
                            + ("" if up else f" (exit status {qsd.returncode})")))
            if not up:
                break
            try:
                exports = {e["id"] for e in q.cmd("query-block-exports")}
            except Exception as e:
                exports = set()
                print(f"QMP: {e}")
            results.append((exports == set(sock), f"{name}: every export is "
                            "still there"))
            err = good_round(sock["bystander"], seed)
            results.append((err is None, f"{name}: the other export serves "
                            f"a new frontend{': ' + err if err else ''}"))
            err = good_round(sock["victim"], seed + 100)
            results.append((err is None, f"{name}: the victim serves a new "
                            f"frontend{': ' + err if err else ''}"))
        if qsd.poll() is None:
            try:
                q.cmd("quit")
            except (OSError, EOFError):
                pass    # it may close the monitor before it answers
            try:
                qsd.wait(timeout=30)
            except subprocess.TimeoutExpired:
                print("the daemon did not quit; its threads:\n" +
                      backtraces(qsd.pid), flush=True)
                qsd.kill()
                qsd.wait()
        results.append((qsd.returncode == 0, "the daemon quit cleanly (exit "
                        f"status {qsd.returncode})"))
        for export, where in (("slow1", "one IOThread"),
                              ("slow", "queues in two IOThreads")):
            if a.case and "restart-in-flight" not in a.case:
                break
            err = restart_in_flight(a, disk, export)
            results.append((err is None, f"{where}: a daemon killed with a "
                            "request in flight behind a completed one: the "
                            "next daemon completes it once, without a kick"
                            + (f": {err}" if err else "")))
        for multi, where in ((False, "one AioContext"),
                             (True, "queues in two IOThreads")):
            if a.case and "stop-in-drain" not in a.case:
                break
            err = stop_in_drain(a, multi)
            results.append((err is None, f"{where}: SIGTERM while "
                            "block_resize holds a drain of the export's node: "
                            "the daemon exits with status 0"
                            + (f": {err}" if err else "")))
        if not a.case or "iothread-del" in a.case:
            err = iothread_del(a, disk)
            results.append((err is None, "object-del of an IOThread that "
                            "a queue runs in: the queue goes on, the daemon "
                            "quits cleanly" + (f": {err}" if err else "")))
        if not a.case or "throttle-wakes" in a.case:
            err = throttle_wakes(a, disk)
            results.append((err is None, "a queue held at the bound of long "
                            "chains: another queue's completions do not "
                            "serve the queues again each"
                            + (f": {err}" if err else "")))
        if not a.case or "queue-share" in a.case:
            err = queue_share(a, disk)
            results.append((err is None, "a queue held at the bound of long "
                            "chains: another queue's long chains are served "
                            "within its share" + (f": {err}" if err else "")))
        if not a.case or "pool-given-back" in a.case:
            err = pool_given_back(a, disk)
            results.append((err is None, "a frontend with a deep ring hangs "
                            "up: the coroutine pool is given back its share"
                            + (f": {err}" if err else "")))
        if not a.case or "quit-busy" in a.case:
            err = quit_busy(a, disk)
            results.append((err is None, "the daemon quits with frontends "
                            "connected and a request in flight, 5 times"
                            + (f": {err}" if err else "")))
        if a.malloc_count and "long-chains" in (a.case or ["long-chains"]):
            peak = heap_peak(mc_out)
            results.append((peak is not None and
                            peak < LONG_BOUND + (16 << 20), "the daemon's "
                            "heap stayed within the bound of long chains in "
                            f"flight (peak {peak and peak >> 20} MiB, bound "
                            f"{LONG_BOUND >> 20} MiB and 16 MiB for the rest)"))
    finally:
        if qsd.poll() is None:
            qsd.kill()
            qsd.wait()
        stderr = qsd.stderr.read()
        if stderr:
            print("daemon stderr:\n" + stderr.rstrip())
    if "pinning" in (a.case or ["pinning"]):
        warned = stderr.count("'bystander': the frontend did not accept "
                              "VHOST_USER_PROTOCOL_F_PINNED_MEMORY")
        results.append((warned == 1, "the export warned once that a "
                        f"frontend did not accept pinning ({warned} times)"))
    if a.fd_check:
        results.append(fd_check_verdict(os.path.join(a.workdir, "fd-check")))
    if a.tsan_log:
        results += tsan_verdict(a.tsan_log)
    for ok, what in results:
        print(f"{'PASS' if ok else 'FAIL'}: {what}")
    return 0 if all(ok for ok, _ in results) else 1


def fd_check_verdict(path):
    """bench/fd-check's report of the daemon's closes of a descriptor that
    was not open.  Each is the second close of a pair: had another thread
    got the number in between (the next client's socket, a descriptor it
    received), the close would have taken it away."""
    try:
        with open(path) as f:
            report = f.read()
    except FileNotFoundError:
        report = ""
    closes = report.count(": not open, thread ")
    if closes:
        print("fd-check, the first of them:\n" +
              "\n".join(report.splitlines()[:14]), flush=True)
    return (not closes, "the daemon closed no descriptor twice "
            f"({closes} closes of a descriptor that was not open)")


# The code a race of the export would be in: the vhost-user server, the
# export, libvhost-user, and the fixed buffers under it.
TSAN_OURS = ("vhost-user-server.c", "vhost-user-blk-server.c",
             "vhost-user-blk-mem.c", "libvhost-user.c", "io_uring-fixed.c",
             "fdmon-io_uring", "io_uring.c", "virtio-blk-handler.c",
             "block/export/export.c")
TSAN_ACCESS = re.compile(r"^  (Previous )?(Atomic )?(read|write|Read|Write) "
                         r"of size")


def tsan_verdict(logdir):
    """Each ThreadSanitizer report whose racing access (the first frame of
    either access) is in TSAN_OURS fails; the others are upstream's own
    (QEMU's thread pool, aio_wait_bh(), iothread start-up, coroutine
    hand-offs TSan cannot follow) and are only counted."""
    ours, others = [], 0
    for name in sorted(os.listdir(logdir)):
        if not name.startswith("tsan."):
            continue
        with open(os.path.join(logdir, name)) as f:
            text = f.read()
        for report in text.split("WARNING: ThreadSanitizer:")[1:]:
            lines = report.splitlines()
            top = [lines[i + 1].strip() for i, line in enumerate(lines[:-1])
                   if TSAN_ACCESS.match(line)]
            mine = [t for t in top if any(o in t for o in TSAN_OURS)]
            if mine:
                ours.append(lines[0].strip() + ": " + " / ".join(mine))
            else:
                others += 1
    for r in ours:
        print("tsan: " + r)
    return [(not ours, f"ThreadSanitizer reports no race in the export's "
             f"code ({len(ours)} there; {others} elsewhere, upstream's)")]


if __name__ == "__main__":
    sys.exit(main())
