#!/usr/bin/env python3
"""A minimal QMP client for the vblk-uring scripts (standard library only)."""

import json
import select
import socket
import sys
import time


class QMP:
    def __init__(self, path, timeout=30.0):
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                self.sock.connect(path)
                break
            except (FileNotFoundError, ConnectionRefusedError):
                self.sock.close()
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        self.path = path
        self.timeout = timeout
        self.buf = b""
        self.events = []
        greeting = self._read(timeout)
        if not greeting or "QMP" not in greeting:
            raise RuntimeError(f"not a QMP greeting: {greeting}")
        self.cmd("qmp_capabilities")

    def _read(self, timeout):
        """The next message, or None when @timeout passes first."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.sock], [], [], left)[0]:
                return None
            data = self.sock.recv(65536)
            if not data:
                raise EOFError(f"{self.path}: QEMU closed QMP")
            self.buf += data
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def cmd(self, name, **args):
        msg = {"execute": name}
        if args:
            msg["arguments"] = args
        self.sock.sendall(json.dumps(msg).encode() + b"\n")
        while True:
            reply = self._read(self.timeout)
            if reply is None:
                raise TimeoutError(f"{self.path}: no reply to {name} in "
                                   f"{self.timeout:g} s")
            if "event" in reply:
                self.events.append(reply)
                continue
            if "error" in reply:
                raise RuntimeError(f"{name}: {reply['error']['desc']}")
            return reply["return"]

    def wait_event(self, name, timeout):
        """The first event called @name (seen before or now), or None."""
        deadline = time.monotonic() + timeout
        while True:
            for ev in self.events:
                if ev["event"] == name:
                    return ev
            msg = self._read(min(1.0, max(0.0, deadline - time.monotonic())))
            if msg is not None and "event" in msg:
                self.events.append(msg)
            elif time.monotonic() >= deadline:
                return None

    def hmp(self, command_line):
        return self.cmd("human-monitor-command", **{"command-line": command_line})

    def close(self):
        self.sock.close()


if __name__ == "__main__":
    # qmp.py SOCKET COMMAND [JSON-ARGS]: print the reply as JSON.
    q = QMP(sys.argv[1])
    arguments = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
    print(json.dumps(q.cmd(sys.argv[2], **arguments), indent=2))
