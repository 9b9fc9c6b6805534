#!/usr/bin/env python3
"""Start QEMU with a multi-queue virtio-blk, report it over QMP, quit."""

import argparse
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from qmp import QMP  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--qemu", required=True)
    ap.add_argument("--qemu-img", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--queues", type=int, default=16)
    ap.add_argument("--queue-size", type=int, default=256)
    ap.add_argument("--mem", type=int, default=512)
    ap.add_argument("--aio", default="io_uring")
    ap.add_argument("--hugetlb", default="on")
    a = ap.parse_args()

    os.makedirs(a.workdir, exist_ok=True)
    disk = os.path.join(a.workdir, "disk.img")
    sock = os.path.join(a.workdir, "qmp.sock")
    subprocess.run([a.qemu_img, "create", "-q", "-f", "raw", disk, "256M"],
                   check=True)
    if os.path.exists(sock):
        os.unlink(sock)

    ram = f"memory-backend-memfd,id=ram0,size={a.mem}M,share=on"
    if a.hugetlb == "on":
        ram += ",hugetlb=on,hugetlbsize=2M"
    cmd = [
        a.qemu, "-machine", "q35,memory-backend=ram0", "-accel", "tcg",
        "-m", f"{a.mem}M", "-smp", "2", "-nodefaults", "-display", "none",
        "-S", "-object", ram, "-object", "iothread,id=io0",
        "-blockdev", f"file,node-name=disk0,filename={disk},aio={a.aio},"
                     "cache.direct=on",
        "-device", f"virtio-blk-pci,id=vblk0,drive=disk0,iothread=io0,"
                   f"num-queues={a.queues},queue-size={a.queue_size}",
        "-qmp", f"unix:{sock},server=on,wait=off",
    ]
    print("$ " + " ".join(cmd), flush=True)
    qemu = subprocess.Popen(cmd)
    try:
        q = QMP(sock)
        report(q, a)
        q.cmd("quit")
        rc = qemu.wait(timeout=30)
    finally:
        if qemu.poll() is None:
            qemu.kill()
            qemu.wait()
    if rc != 0:
        print(f"QEMU exited with status {rc}", file=sys.stderr)
        return 1
    print("QEMU quit cleanly")
    return 0


def report(q, a):
    version = q.cmd("query-version")["qemu"]
    print(f"QEMU {version['major']}.{version['minor']}.{version['micro']}")
    path = "/machine/peripheral/vblk0"
    props = {p: q.cmd("qom-get", path=path, property=p)
             for p in ("num-queues", "queue-size", "seg-max-adjust")}
    print(f"virtio-blk vblk0: num-queues={props['num-queues']} "
          f"queue-size={props['queue-size']}")
    for blk in q.cmd("query-named-block-nodes"):
        if blk["node-name"] == "disk0":
            print(f"backend disk0: {blk['drv']} {blk['file']} "
                  f"({blk['image']['virtual-size'] >> 20} MiB), "
                  f"aio={a.aio}, cache.direct={blk['cache']['direct']}")
    for dev in q.cmd("x-query-virtio"):
        if dev["path"].startswith(path):
            st = q.cmd("x-query-virtio-status", path=dev["path"])
            print(f"virtio device {st['name']}: status={st['status']}, "
                  f"{st['num-vqs']} virtqueues")
    for m in q.cmd("query-memdev"):
        print(f"guest RAM {m['id']}: {m['size'] >> 20} MiB, "
              f"hugetlb={a.hugetlb}, share={m['share']}")
    if (props["num-queues"] != a.queues or
            props["queue-size"] != a.queue_size):
        raise RuntimeError("device does not have the requested queues")


if __name__ == "__main__":
    sys.exit(main())
