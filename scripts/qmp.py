#!/usr/bin/env python3
"""A minimal QMP client for the vblk-uring scripts (standard library only)."""

import json
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
        self.sock.settimeout(timeout)
        self.reader = self.sock.makefile("r")
        self.events = []
        greeting = json.loads(self.reader.readline())
        if "QMP" not in greeting:
            raise RuntimeError(f"not a QMP greeting: {greeting}")
        self.cmd("qmp_capabilities")

    def cmd(self, name, **args):
        msg = {"execute": name}
        if args:
            msg["arguments"] = args
        self.sock.sendall(json.dumps(msg).encode() + b"\n")
        while True:
            line = self.reader.readline()
            if not line:
                raise RuntimeError(f"QEMU closed QMP during {name}")
            reply = json.loads(line)
            if "event" in reply:
                self.events.append(reply)
                continue
            if "error" in reply:
                raise RuntimeError(f"{name}: {reply['error']['desc']}")
            return reply["return"]

    def hmp(self, command_line):
        return self.cmd("human-monitor-command", **{"command-line": command_line})

    def close(self):
        self.sock.close()


if __name__ == "__main__":
    # qmp.py SOCKET COMMAND [JSON-ARGS]: print the reply as JSON.
    q = QMP(sys.argv[1])
    arguments = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
    print(json.dumps(q.cmd(sys.argv[2], **arguments), indent=2))
