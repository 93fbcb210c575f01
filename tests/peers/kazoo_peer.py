"""A kazoo peer for zk-recipes' interop tests and benchmarks. Runs under Debian's /usr/bin/python3.

    kazoo_peer.py lock  CONNECT PATH ROUNDS COUNTER EVENTS OCCUPANCY ID SESSION_MS
    kazoo_peer.py hold  CONNECT PATH ID SESSION_MS [lock|read|write]
                                    (prints HOLDING <seq>; releases on stdin EOF or "release")
    kazoo_peer.py bench CONNECT PATH SECONDS ID SESSION_MS

`lock` mode follows the same protocol as CuratorPeer.java: exclusive OCCUPANCY file (exit 3 on
overlap), "enter ID SEQ" / "exit ID SEQ" lines in EVENTS, a read-modify-write COUNTER.
"""

import os
import re
import sys
import time

from kazoo.client import KazooClient

SEQ = re.compile(r"(-?\d{10})$")


def connect(hosts, session_ms):
    client = KazooClient(hosts=hosts, timeout=session_ms / 1000.0)
    client.start(timeout=30)
    return client


def append(path, line):
    with open(path, "a") as f:
        f.write(line + "\n")


def wait_for_stdin(word):
    for line in sys.stdin:
        if line.strip() == word:
            return


def main():
    mode = sys.argv[1]
    if mode == "lock":
        hosts, path, rounds, counter, events, occupancy, ident, session = sys.argv[2:10]
        client = connect(hosts, int(session))
        lock = client.Lock(path, ident)
        for _ in range(int(rounds)):
            lock.acquire()
            seq = int(SEQ.search(lock.node).group(1))
            try:
                fd = os.open(occupancy, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
                os.close(fd)
            except FileExistsError:
                print("OVERLAP " + ident, flush=True)
                os._exit(3)
            append(events, "enter %s %d" % (ident, seq))
            data, stat = client.get(counter)
            client.set(counter, str(int(data.decode().strip()) + 1).encode())
            os.unlink(occupancy)
            append(events, "exit %s %d" % (ident, seq))
            lock.release()
        client.stop()
        print("DONE", flush=True)
    elif mode == "hold":
        hosts, path, ident, session = sys.argv[2:6]
        kind = sys.argv[6] if len(sys.argv) > 6 else "lock"
        client = connect(hosts, int(session))
        lock = {"lock": client.Lock, "read": client.ReadLock, "write": client.WriteLock}[kind](path, ident)
        lock.acquire()
        print("HOLDING %d" % int(SEQ.search(lock.node).group(1)), flush=True)
        wait_for_stdin("release")
        lock.release()
        client.stop()
        print("RELEASED", flush=True)
    elif mode == "bench":
        hosts, path, seconds, ident, session = sys.argv[2:7]
        client = connect(hosts, int(session))
        lock = client.Lock(path, ident)
        print("READY", flush=True)
        wait_for_stdin("go")
        end = time.monotonic() + float(seconds)
        count = 0
        while time.monotonic() < end:
            lock.acquire()
            count += 1
            lock.release()
        print("COUNT %d" % count, flush=True)
        client.stop()
    else:
        sys.stderr.write("unknown mode %s\n" % mode)
        sys.exit(2)


if __name__ == "__main__":
    main()
